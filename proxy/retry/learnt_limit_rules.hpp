#pragma once
// A queue's delivery limit as RabbitMQ works it out, from what its management API shows
// (GET /api/queues/VHOST/NAME): the x-delivery-limit argument, the delivery-limit of the
// policy and operator policy in force (effective_policy_definition, already merged), and the
// default of RabbitMQ 4.0 and later. Pure: JSON text in, a value out; no I/O.
//
// The rules follow rabbitmq-server's source (deps/rabbit/src/rabbit_quorum_queue.erl,
// gather_policy_config and resolve_delivery_limit; rabbit_policies.erl, merge_policy_value;
// rabbit_queue_type_util.erl, args_policy_lookup; rabbit_fifo.erl, return_one):
// - 3.x: min(policy, argument); no default; a negative argument is kept as it is, so the
//   message passes it at its first return, as with 0 (a policy must be 0 or more there);
// - 4.0 and later: min(policy, argument), or max of the two when either is negative; a
//   negative limit is none; neither set on a quorum queue: 20;
// - 4.3 and later also take 20 for a value that is not an integer.
// Every comparison is Erlang's, where any number sorts before any other term (a string).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "proxy/retry/queue_facts.hpp"

namespace nackguard::retry {

struct BrokerVersion {
  int major = 0;
  int minor = 0;
  auto operator<=>(const BrokerVersion&) const = default;
};

// "3.10.8", "4.0.5", "4.1.0-rc.1", "4.2.3+2.g1234abc": nullopt unless it starts with
// MAJOR.MINOR.
std::optional<BrokerVersion> parse_broker_version(std::string_view text);

// Where a queue's delivery limit comes from. `policies`: both a policy and an operator policy
// apply, and which of the two set the value is not visible in the API's answer.
enum class LimitSource : std::uint8_t {
  none,
  argument,
  policy,
  operator_policy,
  policies,
  broker_default
};
std::string_view to_string(LimitSource source);

// "classic", "quorum", "stream" or "unknown".
std::string_view to_string(QueueFacts::Type type);

// A delivery limit as RabbitMQ holds it: an integer, a float, or anything else (an
// x-delivery-limit argument is not validated, so a client may declare it as a string).
struct LimitValue {
  enum class Kind : std::uint8_t { integer, real, other };
  Kind kind = Kind::other;
  double number = 0;  // integer and real
  static LimitValue integer(std::int64_t value) { return {Kind::integer, double(value)}; }
};

// What the management API shows of a queue, as far as its delivery limit goes.
struct LimitInputs {
  QueueFacts::Type type = QueueFacts::Type::unknown;
  std::optional<LimitValue> argument;    // arguments["x-delivery-limit"]
  std::optional<LimitValue> policy;      // effective_policy_definition["delivery-limit"]
  bool policy_applies = false;           // "policy" names one
  bool operator_policy_applies = false;  // "operator_policy" names one
};

struct QueueLimit {
  QueueFacts::Type type = QueueFacts::Type::unknown;
  // The count past which the broker dead-letters or drops a message: it goes when its
  // delivery count is greater than this. nullopt: no limit.
  std::optional<std::uint32_t> limit;
  LimitSource source = LimitSource::none;
  bool operator==(const QueueLimit&) const = default;
};

// The limit in force on a queue of RabbitMQ `version`, and where it comes from. Only quorum
// queues have one. A tie between argument and policy is said to come from the argument.
QueueLimit resolve_queue_limit(const LimitInputs& inputs, BrokerVersion version);

struct QueueJsonReading {
  enum class Outcome : std::uint8_t {
    ok,
    // A quorum queue without effective_policy_definition: RabbitMQ 3.x shows it from the
    // queue's statistics, which come a few seconds after it was declared.
    no_statistics_yet,
    malformed,
  };
  Outcome outcome = Outcome::malformed;
  QueueLimit limit;     // ok
  std::string problem;  // malformed: what was wrong with it
};

// The body of GET /api/queues/VHOST/NAME.
QueueJsonReading read_queue_json(std::string_view json, BrokerVersion version);

// The body of GET /api/overview: its rabbitmq_version. nullopt, with `problem` saying why,
// when it has none.
std::optional<BrokerVersion> read_overview_json(std::string_view json, std::string& problem);

}  // namespace nackguard::retry
