#pragma once
// What one connection's guard learns of the queues it sees and of the broker's delivery
// limits: the type and limit a client's queue.declare names, that a queue is a quorum queue
// (a delivery carried x-delivery-count), the management API's answers (asked at most once per
// refresh interval and queue), and from all of it the limit in force on a queue
// (retry::broker_delivery_limit). The facts are shared by every connection (GuardContext);
// this remembers what this connection already told or asked.

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "proxy/amqp/methods.hpp"
#include "proxy/retry/decision.hpp"
#include "proxy/retry/guard_context.hpp"
#include "proxy/retry/queue_facts.hpp"

namespace nackguard::guard {

class LimitWatch {
 public:
  explicit LimitWatch(retry::GuardContext& context) : context_(context) {}

  // The connection's vhost and RabbitMQ's major version (0 if unknown), from its handshake.
  void on_open(std::string vhost, int broker_major);
  // A client's queue.declare: its x-queue-type and x-delivery-limit.
  void on_queue_declare(const amqp::QueueDeclare& declare);
  // A delivery from `queue` carried x-delivery-count: it is a quorum queue.
  void learn_quorum(const std::string& queue);
  // Asks the management API (when one is configured) of `queue`'s limit, so that it is known
  // before a return needs it: once per refresh interval and connection.
  void ask(const std::string& queue);
  // The broker's delivery limit in force on `queue` under `policy`.
  retry::LimitInForce limit(const retry::Policy& policy, const std::string& queue);
  // Whether one more return of a delivery from `queue` that carries x-delivery-count
  // `broker_count` may pass that limit.
  bool next_return_passes(const retry::Policy& policy, const std::string& queue,
                          std::uint32_t broker_count);
  // Whether one return of a message that carries no x-delivery-count passes the limit on
  // `queue` (a limit of 0 or 1).
  bool first_return_passes(const retry::Policy& policy, const std::string& queue);

 private:
  retry::GuardContext& context_;
  std::string vhost_;
  int broker_major_ = 0;
  std::unordered_set<std::string> quorum_learnt_;  // queues told to queue_facts() as quorum
  // Queues ask() asked of, and when it asks again (steady ms).
  std::unordered_map<std::string, std::int64_t> asked_;
};

}  // namespace nackguard::guard
