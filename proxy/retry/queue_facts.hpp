#pragma once
// What the proxy knows of a queue from the traffic through it: its type and the delivery limit
// it was declared with. Shared by all connections and bounded; with it, the pure rules that give
// a queue's broker delivery limit and the type of the queues nackguard declares for it.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "proxy/retry/policy.hpp"

namespace nackguard::retry {

struct QueueFacts {
  enum class Type : std::uint8_t { unknown, classic, quorum, stream };
  Type type = Type::unknown;
  // x-delivery-limit of a queue.declare that passed through the proxy, as given (negative: none).
  std::optional<std::int64_t> declared_limit;
  bool operator==(const QueueFacts&) const = default;
};

// The x-queue-type argument's value: "quorum", "classic", "stream"; anything else is unknown.
QueueFacts::Type queue_type_from_argument(std::string_view value);

// The broker's delivery limit in force on a queue, and where nackguard has it from (for /status).
struct LimitInForce {
  enum class Source : std::uint8_t {
    policy_file,  // the policy's broker_delivery_limit (a number, or none)
    management,   // the management API's view of the queue (LearntLimits)
    declared,     // a queue.declare's x-delivery-limit of 0 or 1, tighter than the assumed one
    assumed,      // none could be learnt: kAssumedBrokerLimit (outcome.hpp)
    classic,      // a classic queue has none
  };
  std::optional<std::uint32_t> limit;  // nullopt: none
  Source source = Source::assumed;
};
std::string_view to_string(LimitInForce::Source source);

// In this order: the policy's broker_delivery_limit; what the management API says of the queue
// (`learnt`, when it was looked up); none for a queue known to be classic; otherwise the
// assumed limit, or the x-delivery-limit the queue was declared with through the proxy when it
// is tighter. A declared limit is only an upper bound: a RabbitMQ policy or operator policy may
// set a lower one, which no frame shows.
// On RabbitMQ 3.x (`broker_major` 3) a negative x-delivery-limit is no "none": the broker keeps
// it as it is, and a message passes it at its first return, as with 0 (rabbit_fifo.erl).
LimitInForce broker_delivery_limit(const BrokerDeliveryLimit& policy, const QueueFacts& facts,
                                   const std::optional<LimitInForce>& learnt = std::nullopt,
                                   int broker_major = 0);

// The type of the DLQ and delay queues nackguard declares for a queue: the policy's choice, or
// with `same` the source queue's type as far as the proxy knows it (classic otherwise).
QueueType declared_queue_type(QueueType policy, const QueueFacts& facts);

// The facts of at most `max_queues` queues; past that the oldest learnt is forgotten.
class QueueFactsRegistry {
 public:
  explicit QueueFactsRegistry(std::size_t max_queues = 10000) : max_queues_(max_queues) {}

  // A queue.declare (not passive) with these arguments passed through the proxy.
  void on_declare(std::string_view queue, QueueFacts::Type type,
                  std::optional<std::int64_t> delivery_limit);
  // A delivery from the queue carried x-delivery-count: only quorum queues count deliveries.
  void on_delivery_count(std::string_view queue);
  QueueFacts find(std::string_view queue) const;
  // Whether a queue was ever declared through the proxy with an x-delivery-limit that leaves a
  // message's first return no room (next_return_passes(0, limit): 0 or 1), sticky. Lock-free,
  // for every delivery.
  bool tight_limit_declared() const {
    return tight_limit_declared_.load(std::memory_order_relaxed);
  }
  // Whether any queue was ever learnt to be a quorum queue, sticky: lock-free, for every
  // delivery of a deployment without one.
  bool any_quorum() const { return any_quorum_.load(std::memory_order_relaxed); }
  bool is_quorum(std::string_view queue) const {
    return any_quorum() && find(queue).type == QueueFacts::Type::quorum;
  }

  std::size_t size() const;
  std::size_t max_queues() const { return max_queues_; }
  std::uint64_t forgotten() const;

 private:
  QueueFacts& slot(std::string_view queue);  // with mutex_ held

  std::size_t max_queues_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, QueueFacts> facts_;
  std::deque<std::string> order_;  // names in the order they were learnt
  std::uint64_t forgotten_ = 0;
  std::atomic<bool> tight_limit_declared_{false};
  std::atomic<bool> any_quorum_{false};
};

}  // namespace nackguard::retry
