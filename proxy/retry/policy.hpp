#pragma once
// The policy model: what to do with a queue's returned messages. Plain data; the YAML loader
// lives in proxy/config/policy_loader.*, matching in policy_set.*.

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace nackguard::retry {

using Millis = std::chrono::milliseconds;

struct IdentitySource {
  enum class Kind { message_id, header, correlation_id, body };
  Kind kind = Kind::message_id;
  std::string header;  // for Kind::header: the header's name ("header:id" in YAML)
  bool operator==(const IdentitySource&) const = default;
};

enum class RequeueMode { immediate, delayed };

struct Backoff {
  enum class Jitter { none, full, fraction };
  Millis initial{1000};
  double multiplier = 2.0;
  Millis max{600000};
  Jitter jitter = Jitter::full;
  double jitter_fraction = 0.0;  // for Jitter::fraction, in (0, 1]
  bool operator==(const Backoff&) const = default;
};

// Outage detection counts distinct messages, not deliveries: a message delivered or returned
// many times within the window counts once (see QueueHealth).
struct RateLimits {
  Millis window{10000};
  std::uint32_t per_message = 3;    // returns of one message within window above this: delay
  double outage_ratio = 0.5;        // messages returned / messages delivered above this...
  std::uint32_t min_messages = 20;  // ...once this many messages were seen in window: outage
  // After this long in outage, returns are counted again (a queue holding only poison
  // messages would otherwise delay them for ever).
  Millis max_outage{30 * 60 * 1000};
  bool operator==(const RateLimits&) const = default;
};

struct DeadLetter {
  enum class Via { publish, reject };
  Via via = Via::publish;
  std::string exchange;                     // "" = the default exchange: the proxy declares the DLQ
  std::string routing_key = "{queue}.dlq";  // "{queue}" is replaced by the queue's name
  std::string routing_key_for(std::string_view queue) const;
  bool operator==(const DeadLetter&) const = default;
};

// The broker's own delivery limit on the queue: a quorum queue's x-delivery-limit, past which
// RabbitMQ dead-letters the message itself, or drops it when the queue has no dead-letter
// exchange. nackguard never forwards a return that would pass it (see BrokerLimits).
struct BrokerDeliveryLimit {
  enum class Kind {
    automatic,  // from the queue's declaration seen by the proxy, else 20 on 4.0+ quorum queues
    none,       // the queue has no limit
    fixed,      // `value`
  };
  Kind kind = Kind::automatic;
  std::uint32_t value = 0;
  bool operator==(const BrokerDeliveryLimit&) const = default;
};

// The type of the queues nackguard declares for a queue (its DLQ and delay queues).
enum class QueueType {
  same,  // the source queue's type, as far as the proxy knows it (classic otherwise)
  classic,
  quorum,
};

struct Policy {
  std::string queue = "*";  // exact name, or a glob with * and ?
  std::uint32_t max_redeliveries = 10;
  std::vector<IdentitySource> identity = {{IdentitySource::Kind::message_id, ""},
                                          {IdentitySource::Kind::header, "id"},
                                          {IdentitySource::Kind::correlation_id, ""},
                                          {IdentitySource::Kind::body, ""}};
  RequeueMode requeue = RequeueMode::immediate;
  Backoff backoff;
  RateLimits rate;
  DeadLetter dead_letter;
  BrokerDeliveryLimit broker_delivery_limit;
  QueueType queue_type = QueueType::same;
  // A delivery the consumer holds unacked this long: nackguard closes its channel (406) and
  // counts one return of it, as for RabbitMQ's consumer_timeout. 0: off (the default).
  Millis ack_timeout{0};
  std::string source;  // where it was defined, "policies/orders.yaml", or "built-in default"
  // What the loader warned about, one line each as "FILE:LINE:COL: key: what to do" (an old
  // key name that still works); --check-config prints them and nackguard logs them at load.
  std::vector<std::string> warnings;

  bool operator==(const Policy&) const = default;
};

std::string_view to_string(RequeueMode mode);
std::string_view to_string(DeadLetter::Via via);
std::string_view to_string(Backoff::Jitter jitter);
std::string_view to_string(QueueType type);
// "20", "none" or "auto", as written in a policy file.
std::string to_string(const BrokerDeliveryLimit& limit);
// As written in a policy's identity list: "message_id", "header:id", "correlation_id", "body".
std::string to_string(const IdentitySource& source);
// The effective policy as `key: value` lines, for --check-config.
std::string describe(const Policy& policy);

}  // namespace nackguard::retry
