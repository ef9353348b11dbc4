#include "proxy/retry/learnt_limit_rules.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

#include <charconv>
#include <cmath>
#include <limits>

namespace nackguard::retry {

namespace json = boost::json;

namespace {

// RabbitMQ 4.0 and later: ?DEFAULT_DELIVERY_LIMIT in rabbit_quorum_queue.erl.
constexpr std::uint32_t kQuorumDefaultLimit = 20;

bool four_or_later(BrokerVersion version) {
  return version.major >= 4;
}

// 4.3's get_delivery_limit takes the default for anything that is not an integer.
bool default_for_non_integers(BrokerVersion version) {
  return version >= BrokerVersion{4, 3};
}

bool numeric(const LimitValue& value) {
  return value.kind != LimitValue::Kind::other;
}

bool negative(const LimitValue& value) {
  return numeric(value) && value.number < 0;
}

// Erlang's term order, which min/2 and max/2 follow: numbers by value, before anything else.
bool less(const LimitValue& a, const LimitValue& b) {
  if (numeric(a) && numeric(b)) return a.number < b.number;
  return numeric(a) && !numeric(b);
}

// Whether the argument's value wins over the policy's: min(policy, argument) on 3.x;
// resolve_delivery_limit/2 on 4.x, which takes the max when either is negative.
bool argument_wins(const LimitValue& policy, const LimitValue& argument, BrokerVersion version) {
  if (four_or_later(version) && (negative(policy) || negative(argument))) {
    return !less(argument, policy);
  }
  return !less(policy, argument);
}

LimitSource policy_source(const LimitInputs& inputs) {
  if (inputs.policy_applies && inputs.operator_policy_applies) return LimitSource::policies;
  if (inputs.operator_policy_applies) return LimitSource::operator_policy;
  return LimitSource::policy;
}

std::uint32_t clamp_limit(double number) {
  constexpr double kMax = std::numeric_limits<std::uint32_t>::max();
  return number >= kMax ? std::numeric_limits<std::uint32_t>::max()
                        : static_cast<std::uint32_t>(std::floor(number));
}

LimitValue limit_value(const json::value& value) {
  if (value.is_int64()) return LimitValue::integer(value.get_int64());
  if (value.is_uint64()) return {LimitValue::Kind::integer, double(value.get_uint64())};
  if (value.is_double()) return {LimitValue::Kind::real, value.get_double()};
  return {};
}

// `key` of a JSON object, or of an Erlang proplist that was empty (rendered as []).
std::optional<LimitValue> find_limit(const json::value* table, std::string_view key) {
  if (table == nullptr || !table->is_object()) return std::nullopt;
  const json::value* found = table->as_object().if_contains(key);
  if (found == nullptr) return std::nullopt;
  return limit_value(*found);
}

bool names_one(const json::object& queue, std::string_view key) {
  const json::value* name = queue.if_contains(key);
  return name != nullptr && name->is_string() && !name->as_string().empty();
}

QueueJsonReading malformed(std::string problem) {
  QueueJsonReading reading;
  reading.problem = std::move(problem);
  return reading;
}

// The document, or nullptr with `problem` set when it is no JSON object.
const json::object* parse_object(std::string_view text, json::value& doc, std::string& problem) {
  boost::system::error_code ec;
  doc = json::parse(text, ec);
  if (ec) {
    problem = "the answer is not JSON (" + ec.message() + ")";
    return nullptr;
  }
  if (!doc.is_object()) {
    problem = "the answer is not a JSON object";
    return nullptr;
  }
  return &doc.as_object();
}

}  // namespace

std::optional<BrokerVersion> parse_broker_version(std::string_view text) {
  BrokerVersion version;
  const char* end = text.data() + text.size();
  auto [dot, major_error] = std::from_chars(text.data(), end, version.major);
  if (major_error != std::errc() || dot == end || *dot != '.') return std::nullopt;
  auto [rest, minor_error] = std::from_chars(dot + 1, end, version.minor);
  if (minor_error != std::errc() || version.major <= 0 || version.minor < 0) return std::nullopt;
  (void)rest;
  return version;
}

std::string_view to_string(LimitSource source) {
  switch (source) {
    case LimitSource::none:
      return "none";
    case LimitSource::argument:
      return "argument";
    case LimitSource::policy:
      return "policy";
    case LimitSource::operator_policy:
      return "operator_policy";
    case LimitSource::policies:
      return "policies";
    case LimitSource::broker_default:
      return "broker_default";
  }
  return "none";
}

std::string_view to_string(QueueFacts::Type type) {
  switch (type) {
    case QueueFacts::Type::classic:
      return "classic";
    case QueueFacts::Type::quorum:
      return "quorum";
    case QueueFacts::Type::stream:
      return "stream";
    case QueueFacts::Type::unknown:
      break;
  }
  return "unknown";
}

QueueLimit resolve_queue_limit(const LimitInputs& inputs, BrokerVersion version) {
  QueueLimit out;
  out.type = inputs.type;
  if (inputs.type != QueueFacts::Type::quorum) return out;  // only quorum queues have a limit
  std::optional<LimitValue> value;
  if (inputs.argument &&
      (!inputs.policy || argument_wins(*inputs.policy, *inputs.argument, version))) {
    value = inputs.argument;
    out.source = LimitSource::argument;
  } else if (inputs.policy) {
    value = inputs.policy;
    out.source = policy_source(inputs);
  }
  const bool take_default =
      !value || (!(value->kind == LimitValue::Kind::integer) && default_for_non_integers(version));
  if (take_default) {
    if (four_or_later(version))
      out = {inputs.type, kQuorumDefaultLimit, LimitSource::broker_default};
    return out;
  }
  if (!numeric(*value)) return out;  // rabbit_fifo compares a count with it: it never passes
  if (value->number < 0) {
    // 4.x: rabbit_fifo takes a negative limit as none. 3.x keeps it, so the first return
    // (count 1) passes it, as it would pass 0.
    if (!four_or_later(version)) out.limit = 0;
    return out;
  }
  out.limit = clamp_limit(value->number);
  return out;
}

QueueJsonReading read_queue_json(std::string_view text, BrokerVersion version) {
  json::value doc;
  std::string problem;
  const json::object* queue = parse_object(text, doc, problem);
  if (queue == nullptr) return malformed(std::move(problem));
  const json::value* type = queue->if_contains("type");
  if (type == nullptr || !type->is_string()) {
    return malformed("the answer has no \"type\": it is not a queue of the management API");
  }
  LimitInputs inputs;
  inputs.type = queue_type_from_argument(std::string_view(type->as_string()));
  inputs.argument = find_limit(queue->if_contains("arguments"), "x-delivery-limit");
  const json::value* effective = queue->if_contains("effective_policy_definition");
  if (effective == nullptr && inputs.type == QueueFacts::Type::quorum) {
    QueueJsonReading reading;
    reading.outcome = QueueJsonReading::Outcome::no_statistics_yet;
    return reading;
  }
  inputs.policy = find_limit(effective, "delivery-limit");
  inputs.policy_applies = names_one(*queue, "policy");
  inputs.operator_policy_applies = names_one(*queue, "operator_policy");
  QueueJsonReading reading;
  reading.outcome = QueueJsonReading::Outcome::ok;
  reading.limit = resolve_queue_limit(inputs, version);
  return reading;
}

std::optional<BrokerVersion> read_overview_json(std::string_view text, std::string& problem) {
  json::value doc;
  const json::object* overview = parse_object(text, doc, problem);
  if (overview == nullptr) return std::nullopt;
  const json::value* version = overview->if_contains("rabbitmq_version");
  if (version == nullptr || !version->is_string()) {
    problem = "the answer has no \"rabbitmq_version\": it is not the management API's overview";
    return std::nullopt;
  }
  std::optional<BrokerVersion> parsed =
      parse_broker_version(std::string_view(version->as_string()));
  if (!parsed)
    problem = "cannot read rabbitmq_version \"" + std::string(version->as_string()) + "\"";
  return parsed;
}

}  // namespace nackguard::retry
