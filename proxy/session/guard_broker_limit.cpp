// What a Guard learns of the queues it sees (their type, the delivery limit they were declared
// with), and the broker's own delivery limit it keeps messages from.

#include "proxy/retry/outcome.hpp"
#include "proxy/session/guard.hpp"
#include "proxy/session/identity.hpp"

namespace nackguard::session {

void Guard::on_queue_declare(const amqp::QueueDeclare& declare) {
  retry::QueueFacts::Type type = retry::QueueFacts::Type::unknown;
  if (const amqp::FieldValue* value = declare.arguments.find("x-queue-type")) {
    if (const std::string* text = value->as_string()) type = retry::queue_type_from_argument(*text);
  }
  std::optional<std::int64_t> limit;
  if (const amqp::FieldValue* value = declare.arguments.find("x-delivery-limit")) {
    limit = value->as_int();
  }
  context_.queue_facts().on_declare(declare.queue, type, limit);
}

retry::LimitInForce Guard::broker_limit(const retry::Policy& policy, const std::string& queue) {
  std::optional<retry::LimitInForce> learnt;
  retry::LearntLimits& limits = context_.learnt_limits();
  if (limits.enabled() &&
      policy.broker_delivery_limit.kind == retry::BrokerDeliveryLimit::Kind::automatic) {
    // Asked here, at the returns and redeliveries that need it: the answer is refreshed lazily.
    learnt = retry::in_force(limits.lookup(facts_.vhost, queue, context_.steady_ms()));
  }
  return retry::broker_delivery_limit(policy.broker_delivery_limit,
                                      context_.queue_facts().find(queue), learnt, broker_major_);
}

void Guard::ask_limit(const std::string& queue) {
  // Deliveries ask the management API (when one is configured) of their queue's limit, so that
  // it is known before a return needs it: once per refresh interval and connection.
  constexpr std::size_t kMaxAsked = 1000;
  retry::LearntLimits& limits = context_.learnt_limits();
  const std::int64_t now = context_.steady_ms();
  auto it = limits_asked_.find(queue);
  if (it != limits_asked_.end() && now < it->second) return;
  if (it == limits_asked_.end()) {
    if (limits_asked_.size() >= kMaxAsked) limits_asked_.clear();
    it = limits_asked_.emplace(queue, 0).first;
  }
  it->second = now + limits.settings().refresh.count();
  limits.lookup(facts_.vhost, queue, now);
}

void Guard::learn_quorum(const std::string& queue) {
  // Once per connection and queue: every redelivery of a quorum queue carries the header.
  constexpr std::size_t kMaxLearnt = 1000;
  if (quorum_learnt_.count(queue)) return;
  if (quorum_learnt_.size() >= kMaxLearnt) quorum_learnt_.clear();
  quorum_learnt_.insert(queue);
  context_.queue_facts().on_delivery_count(queue);
}

bool Guard::at_broker_limit(const Delivery& d, const retry::Policy& policy,
                            const retry::CarriedCount& carried) {
  return carried.broker != 0 &&
         retry::next_return_passes(carried.broker, broker_limit(policy, d.queue).limit) &&
         facts_.reserved_channel.has_value();
}

bool Guard::first_return_passes_broker_limit(const retry::Policy& policy,
                                             const std::string& queue) {
  const retry::BrokerDeliveryLimit& limit = policy.broker_delivery_limit;
  switch (limit.kind) {
    case retry::BrokerDeliveryLimit::Kind::none:
      return false;
    case retry::BrokerDeliveryLimit::Kind::fixed:
      return retry::next_return_passes(0, limit.value);
    case retry::BrokerDeliveryLimit::Kind::automatic:
      // Only a declared x-delivery-limit of 0 or 1 leaves no room (4.0's default is 20): the
      // queue's facts are looked up once such a declaration was seen, not at every delivery.
      return context_.queue_facts().tight_limit_declared() &&
             retry::next_return_passes(0, broker_limit(policy, queue).limit);
  }
  return true;
}

}  // namespace nackguard::session
