#include "proxy/guard/limit_watch.hpp"

#include <optional>
#include <utility>

namespace nackguard::guard {

void LimitWatch::on_open(std::string vhost, int broker_major) {
  vhost_ = std::move(vhost);
  broker_major_ = broker_major;
}

void LimitWatch::on_queue_declare(const amqp::QueueDeclare& declare) {
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

void LimitWatch::learn_quorum(const std::string& queue) {
  // Once per connection and queue: every redelivery of a quorum queue carries the header.
  constexpr std::size_t kMaxLearnt = 1000;
  if (quorum_learnt_.count(queue)) return;
  if (quorum_learnt_.size() >= kMaxLearnt) quorum_learnt_.clear();
  quorum_learnt_.insert(queue);
  context_.queue_facts().on_delivery_count(queue);
}

void LimitWatch::ask(const std::string& queue) {
  constexpr std::size_t kMaxAsked = 1000;
  retry::LearntLimits& limits = context_.learnt_limits();
  const std::int64_t now = context_.steady_ms();
  auto it = asked_.find(queue);
  if (it != asked_.end() && now < it->second) return;
  if (it == asked_.end()) {
    if (asked_.size() >= kMaxAsked) asked_.clear();
    it = asked_.emplace(queue, 0).first;
  }
  it->second = now + limits.settings().refresh.count();
  limits.lookup(vhost_, queue, now);
}

retry::LimitInForce LimitWatch::limit(const retry::Policy& policy, const std::string& queue) {
  std::optional<retry::LimitInForce> learnt;
  retry::LearntLimits& limits = context_.learnt_limits();
  if (limits.enabled() &&
      policy.broker_delivery_limit.kind == retry::BrokerDeliveryLimit::Kind::automatic) {
    // Asked here, at the returns and redeliveries that need it: the answer is refreshed lazily.
    learnt = retry::in_force(limits.lookup(vhost_, queue, context_.steady_ms()));
  }
  return retry::broker_delivery_limit(policy.broker_delivery_limit,
                                      context_.queue_facts().find(queue), learnt, broker_major_);
}

bool LimitWatch::next_return_passes(const retry::Policy& policy, const std::string& queue,
                                    std::uint32_t broker_count) {
  return broker_count != 0 && retry::next_return_passes(broker_count, limit(policy, queue).limit);
}

bool LimitWatch::first_return_passes(const retry::Policy& policy, const std::string& queue) {
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
             retry::next_return_passes(0, this->limit(policy, queue).limit);
  }
  return true;
}

}  // namespace nackguard::guard
