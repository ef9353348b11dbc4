#include "proxy/retry/policy.hpp"

#include <array>
#include <charconv>
#include <cstdint>
#include <sstream>

namespace nackguard::retry {
namespace {

// The spelling of proxy/config/duration.*, which retry cannot depend on: the largest unit that
// represents the value exactly, so that describe() prints what a person would have written.
std::string format_millis(Millis duration) {
  struct Unit {
    std::string_view suffix;
    std::int64_t milliseconds;
  };
  constexpr std::array kUnits{Unit{"h", 3'600'000}, Unit{"m", 60'000}, Unit{"s", 1'000},
                              Unit{"ms", 1}};
  const std::int64_t ms = duration.count();
  for (const Unit& unit : kUnits) {
    if (ms != 0 && ms % unit.milliseconds == 0) {
      return std::to_string(ms / unit.milliseconds) + std::string(unit.suffix);
    }
  }
  return std::to_string(ms) + "ms";
}

// Shortest text that reads back as the same double: "2", "0.5", "1.25".
std::string format_number(double value) {
  std::array<char, 32> buffer{};
  const auto result = std::to_chars(buffer.data(), buffer.data() + buffer.size(), value);
  return std::string(buffer.data(), result.ptr);
}

// An empty string is printed as "" so that the line does not look like a missing value.
std::string format_text(std::string_view text) {
  return text.empty() ? std::string("\"\"") : std::string(text);
}

}  // namespace

std::string DeadLetter::routing_key_for(std::string_view queue) const {
  constexpr std::string_view kPlaceholder = "{queue}";
  std::string result;
  result.reserve(routing_key.size() + queue.size());
  std::string_view rest = routing_key;
  for (auto at = rest.find(kPlaceholder); at != std::string_view::npos;
       at = rest.find(kPlaceholder)) {
    result.append(rest.substr(0, at));
    result.append(queue);
    rest.remove_prefix(at + kPlaceholder.size());
  }
  result.append(rest);
  return result;
}

std::string_view to_string(RequeueMode mode) {
  switch (mode) {
    case RequeueMode::immediate:
      return "immediate";
    case RequeueMode::delayed:
      return "delayed";
  }
  return "unknown";
}

std::string_view to_string(DeadLetter::Via via) {
  switch (via) {
    case DeadLetter::Via::publish:
      return "publish";
    case DeadLetter::Via::reject:
      return "reject";
  }
  return "unknown";
}

std::string_view to_string(Backoff::Jitter jitter) {
  switch (jitter) {
    case Backoff::Jitter::none:
      return "none";
    case Backoff::Jitter::full:
      return "full";
    case Backoff::Jitter::fraction:
      return "fraction";
  }
  return "unknown";
}

std::string_view to_string(QueueType type) {
  switch (type) {
    case QueueType::same:
      return "same";
    case QueueType::classic:
      return "classic";
    case QueueType::quorum:
      return "quorum";
  }
  return "unknown";
}

std::string to_string(const BrokerDeliveryLimit& limit) {
  switch (limit.kind) {
    case BrokerDeliveryLimit::Kind::automatic:
      return "auto";
    case BrokerDeliveryLimit::Kind::none:
      return "none";
    case BrokerDeliveryLimit::Kind::fixed:
      return std::to_string(limit.value);
  }
  return "unknown";
}

std::string to_string(const IdentitySource& source) {
  switch (source.kind) {
    case IdentitySource::Kind::message_id:
      return "message_id";
    case IdentitySource::Kind::header:
      return "header:" + source.header;
    case IdentitySource::Kind::correlation_id:
      return "correlation_id";
    case IdentitySource::Kind::body:
      return "body";
  }
  return "unknown";
}

std::string describe(const Policy& policy) {
  std::string identity = "[";
  for (std::size_t i = 0; i < policy.identity.size(); ++i) {
    if (i != 0) identity += ", ";
    identity += to_string(policy.identity[i]);
  }
  identity += "]";

  const Backoff& backoff = policy.backoff;
  const RateLimits& rate = policy.rate;
  const DeadLetter& dead_letter = policy.dead_letter;
  std::ostringstream out;
  out << "queue: " << format_text(policy.queue) << "\n"
      << "source: " << format_text(policy.source) << "\n"
      << "max_redeliveries: " << policy.max_redeliveries << "\n"
      << "identity: " << identity << "\n"
      << "requeue: " << to_string(policy.requeue) << "\n"
      << "backoff.initial: " << format_millis(backoff.initial) << "\n"
      << "backoff.multiplier: " << format_number(backoff.multiplier) << "\n"
      << "backoff.max: " << format_millis(backoff.max) << "\n"
      << "backoff.jitter: " << to_string(backoff.jitter) << "\n";
  if (backoff.jitter == Backoff::Jitter::fraction) {
    out << "backoff.jitter_fraction: " << format_number(backoff.jitter_fraction) << "\n";
  }
  out << "rate.window: " << format_millis(rate.window) << "\n"
      << "rate.per_message: " << rate.per_message << "\n"
      << "rate.outage_ratio: " << format_number(rate.outage_ratio) << "\n"
      << "rate.min_messages: " << rate.min_messages << "\n"
      << "rate.max_outage: " << format_millis(rate.max_outage) << "\n"
      << "dead_letter.via: " << to_string(dead_letter.via) << "\n"
      << "dead_letter.exchange: " << format_text(dead_letter.exchange) << "\n"
      << "dead_letter.routing_key: " << format_text(dead_letter.routing_key) << "\n"
      << "broker_delivery_limit: " << to_string(policy.broker_delivery_limit) << "\n"
      << "queue_type: " << to_string(policy.queue_type) << "\n"
      << "ack_timeout: "
      << (policy.ack_timeout.count() == 0 ? std::string("off") : format_millis(policy.ack_timeout))
      << "\n";
  return out.str();
}

}  // namespace nackguard::retry
