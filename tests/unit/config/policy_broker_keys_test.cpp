// The policy keys about the broker's own queues: broker_delivery_limit and queue_type, their
// errors, and the --check-config warning about RabbitMQ 4.0's default delivery limit.

#include <gtest/gtest.h>

#include "config/config_test_support.hpp"
#include "proxy/config/policy_loader.hpp"

namespace nackguard::config {
namespace {

using retry::BrokerDeliveryLimit;
using retry::QueueType;
using testing::config_error_of;

retry::Policy parse(std::string_view text) {
  return parse_policy(text, "p.yaml");
}

std::string error_for(std::string_view text) {
  return config_error_of([&] { parse(text); });
}

TEST(BrokerDeliveryLimitKey, Values) {
  EXPECT_EQ(parse("queue: q\n").broker_delivery_limit, BrokerDeliveryLimit{});
  EXPECT_EQ(parse("queue: q\nbroker_delivery_limit: 5\n").broker_delivery_limit,
            (BrokerDeliveryLimit{BrokerDeliveryLimit::Kind::fixed, 5}));
  EXPECT_EQ(parse("queue: q\nbroker_delivery_limit: 0\n").broker_delivery_limit,
            (BrokerDeliveryLimit{BrokerDeliveryLimit::Kind::fixed, 0}));
  EXPECT_EQ(parse("queue: q\nbroker_delivery_limit: none\n").broker_delivery_limit.kind,
            BrokerDeliveryLimit::Kind::none);
  EXPECT_EQ(parse("queue: q\nbroker_delivery_limit: auto\n").broker_delivery_limit.kind,
            BrokerDeliveryLimit::Kind::automatic);
}

TEST(BrokerDeliveryLimitKey, Errors) {
  EXPECT_EQ(error_for("queue: q\nbroker_delivery_limit: -1\n"),
            "p.yaml:2:24: broker_delivery_limit: expected a number of returns such as 20, none, "
            "or auto, got -1; write none for a queue without a limit");
  EXPECT_EQ(error_for("queue: q\nbroker_delivery_limit: [3]\n").substr(0, 60),
            "p.yaml:2:24: broker_delivery_limit: expected a number of ret");
  EXPECT_NE(error_for("queue: q\nbroker_delivery_limit: lots\n").find("p.yaml:2:24: "),
            std::string::npos);
}

TEST(QueueTypeKey, Values) {
  EXPECT_EQ(parse("queue: q\n").queue_type, QueueType::same);
  EXPECT_EQ(parse("queue: q\nqueue_type: quorum\n").queue_type, QueueType::quorum);
  EXPECT_EQ(parse("queue: q\nqueue_type: classic\n").queue_type, QueueType::classic);
  EXPECT_EQ(parse("queue: q\nqueue_type: same\n").queue_type, QueueType::same);
  const std::string error = error_for("queue: q\nqueue_type: qourum\n");
  EXPECT_EQ(error.substr(0, 25), "p.yaml:2:13: queue_type: ");
  EXPECT_NE(error.find("quorum"), std::string::npos);
}

TEST(PolicyWarnings, MaxRedeliveriesAtTheLimitThePolicyNames) {
  retry::Policy under = parse("queue: a\nmax_redeliveries: 18\nbroker_delivery_limit: 20\n");
  // 19: its 20th delivery carries x-delivery-count 19, republished (retry::kUnseenReturns).
  retry::Policy at = parse("queue: b\nmax_redeliveries: 19\nbroker_delivery_limit: 20\n");
  retry::Policy none = parse("queue: c\nmax_redeliveries: 30\nbroker_delivery_limit: none\n");
  retry::Policy fixed = parse("queue: d\nmax_redeliveries: 30\nbroker_delivery_limit: 50\n");
  // An automatic limit is learnt or assumed (2): no max_redeliveries reaches it in particular.
  retry::Policy automatic = parse("queue: e\nmax_redeliveries: 30\n");
  const std::vector<std::string> warnings =
      policy_warnings(retry::PolicySet({under, at, none, fixed, automatic}));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0].substr(0, 49), "warning: p.yaml: max_redeliveries: 19 reaches bro");
  EXPECT_NE(warnings[0].find("broker_delivery_limit: 20"), std::string::npos);
  // The built-in default (10) warns of nothing.
  EXPECT_TRUE(policy_warnings(retry::PolicySet()).empty());
}

// RabbitMQ 4.3 times out no consumer of a classic queue (issue 38): --check-config says what
// bounds a hung one there, the policy's ack_timeout, for each policy without one.
TEST(PolicyNotes, WithoutAckTimeoutNothingBoundsAHungConsumerOnA43ClassicQueue) {
  retry::Policy without = parse("queue: a\n");
  retry::Policy with = parse("queue: b\nack_timeout: 10m\n");
  retry::Policy fallback = parse("queue: \"*\"\nack_timeout: 5m\n");
  const std::vector<std::string> notes = policy_notes(retry::PolicySet({without, with, fallback}));
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0].substr(0, 40), "note: p.yaml: ack_timeout is off. Rabbit");
  EXPECT_NE(notes[0].find("4.3"), std::string::npos);
  EXPECT_NE(notes[0].find("classic"), std::string::npos);
  // The built-in default has none: one note, for it.
  EXPECT_EQ(policy_notes(retry::PolicySet()).size(), 1u);
}

}  // namespace
}  // namespace nackguard::config
