#include "proxy/retry/queue_facts.hpp"

#include "proxy/retry/outcome.hpp"

#include <gtest/gtest.h>

namespace nackguard::retry {
namespace {

using Kind = BrokerDeliveryLimit::Kind;
using Type = QueueFacts::Type;

QueueFacts quorum(std::optional<std::int64_t> declared = std::nullopt) {
  return QueueFacts{Type::quorum, declared};
}

using Source = LimitInForce::Source;

std::optional<std::uint32_t> limit(const BrokerDeliveryLimit& policy, const QueueFacts& facts,
                                   const std::optional<LimitInForce>& learnt = std::nullopt) {
  return broker_delivery_limit(policy, facts, learnt).limit;
}

TEST(BrokerDeliveryLimit, PolicyKeyComesFirst) {
  EXPECT_EQ(limit({Kind::fixed, 5}, quorum(3)), 5u);
  EXPECT_EQ(limit({Kind::fixed, 5}, QueueFacts{}), 5u);
  EXPECT_EQ(limit({Kind::none, 0}, quorum(3)), std::nullopt);
  EXPECT_EQ(broker_delivery_limit({Kind::fixed, 5}, quorum(3)).source, Source::policy_file);
  const LimitInForce learnt{7u, Source::management};
  EXPECT_EQ(limit({Kind::fixed, 5}, quorum(3), learnt), 5u);
}

TEST(BrokerDeliveryLimit, ThenWhatTheManagementApiSays) {
  const LimitInForce learnt{7u, Source::management};
  EXPECT_EQ(limit({}, quorum(3), learnt), 7u);
  EXPECT_EQ(broker_delivery_limit({}, quorum(3), learnt).source, Source::management);
  EXPECT_EQ(limit({}, quorum(), LimitInForce{std::nullopt, Source::management}), std::nullopt);
}

TEST(BrokerDeliveryLimit, OtherwiseAssumedTightWhereARabbitMqPolicyMaySetOne) {
  // A RabbitMQ policy, an operator policy or a declare the proxy never saw may set a limit no
  // frame shows: assumed the tightest nackguard keeps messages from (outcome.hpp).
  EXPECT_EQ(limit({}, quorum()), kAssumedBrokerLimit);
  EXPECT_EQ(limit({}, quorum(50)), kAssumedBrokerLimit);  // a policy may lower a declared one
  EXPECT_EQ(limit({}, quorum(-1)), kAssumedBrokerLimit);
  EXPECT_EQ(limit({}, QueueFacts{}), kAssumedBrokerLimit);
  EXPECT_EQ(broker_delivery_limit({}, quorum()).source, Source::assumed);
  // A declared limit tighter than that is taken: it is the most the broker allows.
  EXPECT_EQ(limit({}, quorum(1)), 1u);
  EXPECT_EQ(limit({}, quorum(0)), 0u);
  EXPECT_EQ(broker_delivery_limit({}, quorum(1)).source, Source::declared);
  // On 3.x a negative x-delivery-limit is kept as it is: a message passes it at its first
  // return, as with 0 (rabbit_fifo.erl); on 4.x it means none.
  EXPECT_EQ(broker_delivery_limit({}, quorum(-1), std::nullopt, 3).limit, 0u);
  EXPECT_EQ(broker_delivery_limit({}, quorum(-1), std::nullopt, 4).limit, kAssumedBrokerLimit);
  // A classic queue has none.
  EXPECT_EQ(limit({}, QueueFacts{Type::classic, std::nullopt}), std::nullopt);
  EXPECT_EQ(broker_delivery_limit({}, QueueFacts{Type::classic, 3}).source, Source::classic);
}

TEST(DeclaredQueueType, SameFollowsTheSource) {
  EXPECT_EQ(declared_queue_type(QueueType::same, quorum()), QueueType::quorum);
  EXPECT_EQ(declared_queue_type(QueueType::same, QueueFacts{}), QueueType::classic);
  EXPECT_EQ(declared_queue_type(QueueType::classic, quorum()), QueueType::classic);
  EXPECT_EQ(declared_queue_type(QueueType::quorum, QueueFacts{}), QueueType::quorum);
}

TEST(QueueFactsRegistry, LearnsFromDeclaresAndDeliveries) {
  QueueFactsRegistry registry(10);
  registry.on_declare("orders", Type::quorum, 5);
  EXPECT_EQ(registry.find("orders"), quorum(5));
  registry.on_delivery_count("jobs");
  EXPECT_EQ(registry.find("jobs").type, Type::quorum);
  // A declaration without x-queue-type keeps what a delivery showed.
  registry.on_declare("jobs", Type::unknown, std::nullopt);
  EXPECT_EQ(registry.find("jobs").type, Type::quorum);
  registry.on_declare("plain", Type::classic, std::nullopt);
  registry.on_delivery_count("plain");
  EXPECT_EQ(registry.find("plain").type, Type::classic);
  EXPECT_EQ(registry.find("unknown"), QueueFacts{});
  registry.on_declare("", Type::quorum, 1);  // a server-named queue: nothing to remember
  EXPECT_EQ(registry.size(), 3u);
}

TEST(QueueFactsRegistry, BoundedOldestForgotten) {
  QueueFactsRegistry registry(2);
  registry.on_declare("a", Type::quorum, std::nullopt);
  registry.on_declare("b", Type::quorum, std::nullopt);
  registry.on_declare("c", Type::quorum, std::nullopt);
  EXPECT_EQ(registry.size(), 2u);
  EXPECT_EQ(registry.forgotten(), 1u);
  EXPECT_EQ(registry.find("a"), QueueFacts{});
  EXPECT_EQ(registry.find("c").type, Type::quorum);
}

// Only a declared limit of 0 or 1 leaves a first return no room (its return and one the
// client never sees); the flag lets the guard skip the lookup at every delivery until one is seen.
TEST(QueueFactsRegistry, RemembersThatATightLimitWasDeclared) {
  QueueFactsRegistry registry(10);
  registry.on_declare("a", Type::quorum, 2);
  registry.on_declare("b", Type::quorum, -1);
  registry.on_declare("c", Type::quorum, std::nullopt);
  EXPECT_FALSE(registry.tight_limit_declared());
  registry.on_declare("d", Type::quorum, 1);
  EXPECT_TRUE(registry.tight_limit_declared());
  registry.on_declare("d", Type::quorum, 5);
  EXPECT_TRUE(registry.tight_limit_declared());  // sticky: only a lookup cost, never a loss
  QueueFactsRegistry zero(10);
  zero.on_declare("e", Type::quorum, 0);
  EXPECT_TRUE(zero.tight_limit_declared());
}

TEST(QueueFacts, TypeArgument) {
  EXPECT_EQ(queue_type_from_argument("quorum"), Type::quorum);
  EXPECT_EQ(queue_type_from_argument("classic"), Type::classic);
  EXPECT_EQ(queue_type_from_argument("stream"), Type::stream);
  EXPECT_EQ(queue_type_from_argument("Quorum"), Type::unknown);
}

}  // namespace
}  // namespace nackguard::retry
