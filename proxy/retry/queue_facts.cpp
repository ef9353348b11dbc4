#include "proxy/retry/queue_facts.hpp"

#include "proxy/retry/decision.hpp"
#include "proxy/retry/outcome.hpp"

#include <algorithm>
#include <limits>

namespace nackguard::retry {
QueueFacts::Type queue_type_from_argument(std::string_view value) {
  if (value == "quorum") return QueueFacts::Type::quorum;
  if (value == "classic") return QueueFacts::Type::classic;
  if (value == "stream") return QueueFacts::Type::stream;
  return QueueFacts::Type::unknown;
}

std::string_view to_string(LimitInForce::Source source) {
  switch (source) {
    case LimitInForce::Source::policy_file:
      return "policy_file";
    case LimitInForce::Source::management:
      return "management_api";
    case LimitInForce::Source::declared:
      return "declared";
    case LimitInForce::Source::assumed:
      return "assumed";
    case LimitInForce::Source::classic:
      return "classic_queue";
  }
  return "unknown";
}

LimitInForce broker_delivery_limit(const BrokerDeliveryLimit& policy, const QueueFacts& facts,
                                   const std::optional<LimitInForce>& learnt, int broker_major) {
  using Source = LimitInForce::Source;
  switch (policy.kind) {
    case BrokerDeliveryLimit::Kind::none:
      return {std::nullopt, Source::policy_file};
    case BrokerDeliveryLimit::Kind::fixed:
      return {policy.value, Source::policy_file};
    case BrokerDeliveryLimit::Kind::automatic:
      break;
  }
  if (learnt) return *learnt;
  if (facts.type == QueueFacts::Type::classic) return {std::nullopt, Source::classic};
  if (facts.declared_limit && *facts.declared_limit < 0 && broker_major == 3) {
    return {0u, Source::declared};
  }
  if (facts.declared_limit && *facts.declared_limit >= 0 &&
      *facts.declared_limit < kAssumedBrokerLimit) {
    return {static_cast<std::uint32_t>(*facts.declared_limit), Source::declared};
  }
  return {kAssumedBrokerLimit, Source::assumed};
}

QueueType declared_queue_type(QueueType policy, const QueueFacts& facts) {
  if (policy != QueueType::same) return policy;
  return facts.type == QueueFacts::Type::quorum ? QueueType::quorum : QueueType::classic;
}

QueueFacts& QueueFactsRegistry::slot(std::string_view queue) {
  auto it = facts_.find(std::string(queue));
  if (it != facts_.end()) return it->second;
  while (!order_.empty() && facts_.size() >= max_queues_) {
    facts_.erase(order_.front());
    order_.pop_front();
    ++forgotten_;
  }
  order_.emplace_back(queue);
  return facts_[std::string(queue)];
}

void QueueFactsRegistry::on_declare(std::string_view queue, QueueFacts::Type type,
                                    std::optional<std::int64_t> delivery_limit) {
  if (queue.empty() || max_queues_ == 0) return;
  std::lock_guard lock(mutex_);
  QueueFacts& facts = slot(queue);
  // A declaration without x-queue-type gets the broker's default type, which the proxy cannot
  // see: what a delivery showed stays.
  if (type != QueueFacts::Type::unknown) facts.type = type;
  if (facts.type == QueueFacts::Type::quorum) any_quorum_.store(true, std::memory_order_relaxed);
  facts.declared_limit = delivery_limit;
  if (delivery_limit && *delivery_limit >= 0 &&
      next_return_passes(0, static_cast<std::uint32_t>(std::min<std::int64_t>(
                                *delivery_limit, std::numeric_limits<std::uint32_t>::max())))) {
    tight_limit_declared_.store(true, std::memory_order_relaxed);
  }
}

void QueueFactsRegistry::on_delivery_count(std::string_view queue) {
  if (queue.empty() || max_queues_ == 0) return;
  std::lock_guard lock(mutex_);
  QueueFacts& facts = slot(queue);
  if (facts.type == QueueFacts::Type::unknown) facts.type = QueueFacts::Type::quorum;
  if (facts.type == QueueFacts::Type::quorum) any_quorum_.store(true, std::memory_order_relaxed);
}

QueueFacts QueueFactsRegistry::find(std::string_view queue) const {
  std::lock_guard lock(mutex_);
  auto it = facts_.find(std::string(queue));
  return it == facts_.end() ? QueueFacts{} : it->second;
}

std::size_t QueueFactsRegistry::size() const {
  std::lock_guard lock(mutex_);
  return facts_.size();
}

std::uint64_t QueueFactsRegistry::forgotten() const {
  std::lock_guard lock(mutex_);
  return forgotten_;
}

}  // namespace nackguard::retry
