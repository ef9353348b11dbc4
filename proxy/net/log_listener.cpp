#include "proxy/net/log_listener.hpp"

#include <spdlog/spdlog.h>

namespace nackguard::net {

std::string printable(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) {
      out += "\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 15];
    } else {
      out += c;
    }
  }
  return out;
}

void LogListener::on_dead_letter(std::string_view queue, std::string_view identity,
                                 std::uint32_t returns, retry::DeadLetterReason reason) {
  spdlog::warn("dead-lettered: queue={} identity={} returns={} reason={} id={}", printable(queue),
               printable(identity), returns, retry::to_string(reason),
               retry::short_id(retry::make_key(queue, identity)));
}

void LogListener::on_fallback(std::string_view queue, retry::Fallback fallback,
                              std::string_view detail) {
  const std::string_view cause = retry::to_string(fallback.cause);
  std::uint64_t suppressed = 0;
  {
    std::lock_guard lock(mutex_);
    auto now = std::chrono::steady_clock::now();
    if (fallbacks_.size() > 10000) fallbacks_.clear();
    auto [it, inserted] = fallbacks_.try_emplace(
        {std::string(queue), fallback.at_broker_limit,
         fallback.at_broker_limit ? retry::FallbackCause::none : fallback.cause});
    Repeats& repeats = it->second;
    if (!inserted && now - repeats.last < kFallbackLogInterval) {
      ++repeats.suppressed;
      return;
    }
    suppressed = repeats.suppressed;
    repeats = Repeats{now, 0};
  }
  // A message at the broker's own delivery limit went back to a broker that may end it.
  const char* outcome = fallback.at_broker_limit
                            ? "the message went back to the broker, whose own delivery limit may "
                              "now dead-letter or drop it"
                            : "the message went back to the broker as the consumer asked, "
                              "nothing is lost";
  if (fallback.at_broker_limit) {
    // The cause under it leads the detail: "cause=at_broker_limit: republish_failed: ...".
    spdlog::warn(
        "fallback: queue={} cause=at_broker_limit: {}: {}; {} ({} similar lines "
        "suppressed)",
        printable(queue), cause, printable(detail), outcome, suppressed);
    return;
  }
  spdlog::warn("fallback: queue={} cause={}: {}; {} ({} similar lines suppressed)",
               printable(queue), cause, printable(detail), outcome, suppressed);
}

void LogListener::on_outage(std::string_view queue, bool started, double ratio) {
  if (started) {
    spdlog::warn(
        "outage started: queue={} return ratio {:.2f}; returns are delayed and not counted "
        "towards dead-lettering until it ends",
        printable(queue), ratio);
  } else {
    spdlog::info("outage ended: queue={} return ratio {:.2f}", printable(queue), ratio);
  }
}

void LogListener::on_ack_timeout(std::string_view queue, std::string_view identity,
                                 std::int64_t held_ms) {
  spdlog::warn(
      "ack timeout: queue={} identity={} id={} unacked for {} ms, past the policy's ack_timeout; "
      "the consumer's channel is closed (406) and the delivery counts one return",
      printable(queue), printable(identity), retry::short_id(retry::make_key(queue, identity)),
      held_ms);
}

void LogListener::on_notice(std::string_view queue, std::string_view what) {
  spdlog::warn("queue={}: {}", printable(queue), printable(what));
}

}  // namespace nackguard::net
