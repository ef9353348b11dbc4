#include "proxy/retry/policy.hpp"

#include <gtest/gtest.h>

namespace nackguard::retry {
namespace {

struct RoutingKeyCase {
  std::string_view name;
  std::string_view pattern;
  std::string_view queue;
  std::string_view expected;
};

TEST(DeadLetter, RoutingKeyReplacesEveryPlaceholder) {
  const RoutingKeyCase cases[] = {
      {"default", "{queue}.dlq", "orders", "orders.dlq"},
      {"twice", "{queue}.{queue}", "a", "a.a"},
      {"none", "errors", "orders", "errors"},
      {"empty pattern", "", "orders", ""},
      {"only placeholder", "{queue}", "orders.eu", "orders.eu"},
      {"unclosed brace kept", "{queue", "orders", "{queue"},
      {"no recursion into the name", "x.{queue}", "{queue}", "x.{queue}"},
      {"adjacent", "{queue}{queue}", "q", "qq"},
  };
  for (const auto& c : cases) {
    DeadLetter dead_letter;
    dead_letter.routing_key = std::string(c.pattern);
    EXPECT_EQ(dead_letter.routing_key_for(c.queue), c.expected) << c.name;
  }
}

TEST(PolicyStrings, EnumNames) {
  EXPECT_EQ(to_string(RequeueMode::immediate), "immediate");
  EXPECT_EQ(to_string(RequeueMode::delayed), "delayed");
  EXPECT_EQ(to_string(DeadLetter::Via::publish), "publish");
  EXPECT_EQ(to_string(DeadLetter::Via::reject), "reject");
  EXPECT_EQ(to_string(Backoff::Jitter::none), "none");
  EXPECT_EQ(to_string(Backoff::Jitter::full), "full");
  EXPECT_EQ(to_string(Backoff::Jitter::fraction), "fraction");
  EXPECT_EQ(to_string(IdentitySource{IdentitySource::Kind::message_id, ""}), "message_id");
  EXPECT_EQ(to_string(IdentitySource{IdentitySource::Kind::header, "task_id"}), "header:task_id");
  EXPECT_EQ(to_string(IdentitySource{IdentitySource::Kind::correlation_id, ""}), "correlation_id");
  EXPECT_EQ(to_string(IdentitySource{IdentitySource::Kind::body, ""}), "body");
}

TEST(Describe, DefaultPolicyPrintsEveryKey) {
  Policy policy;
  policy.source = "built-in default";
  EXPECT_EQ(describe(policy),
            "queue: *\n"
            "source: built-in default\n"
            "max_redeliveries: 10\n"
            "identity: [message_id, header:id, correlation_id, body]\n"
            "requeue: immediate\n"
            "backoff.initial: 1s\n"
            "backoff.multiplier: 2\n"
            "backoff.max: 10m\n"
            "backoff.jitter: full\n"
            "rate.window: 10s\n"
            "rate.per_message: 3\n"
            "rate.outage_ratio: 0.5\n"
            "rate.min_messages: 20\n"
            "rate.max_outage: 30m\n"
            "dead_letter.via: publish\n"
            "dead_letter.exchange: \"\"\n"
            "dead_letter.routing_key: {queue}.dlq\n"
            "broker_delivery_limit: auto\n"
            "queue_type: same\n"
            "ack_timeout: off\n");
}

TEST(Describe, CustomPolicy) {
  Policy policy;
  policy.queue = "orders.*";
  policy.source = "policies/orders.yaml";
  policy.max_redeliveries = 5;
  policy.identity = {{IdentitySource::Kind::header, "task_id"}};
  policy.requeue = RequeueMode::delayed;
  policy.backoff = Backoff{Millis(1500), 1.5, Millis(3'600'000), Backoff::Jitter::fraction, 0.2};
  policy.rate = RateLimits{Millis(90'000), 4, 0.25, 50, Millis(2 * 3'600'000)};
  policy.dead_letter = DeadLetter{DeadLetter::Via::reject, "dlx", "dead.{queue}"};
  EXPECT_EQ(describe(policy),
            "queue: orders.*\n"
            "source: policies/orders.yaml\n"
            "max_redeliveries: 5\n"
            "identity: [header:task_id]\n"
            "requeue: delayed\n"
            "backoff.initial: 1500ms\n"
            "backoff.multiplier: 1.5\n"
            "backoff.max: 1h\n"
            "backoff.jitter: fraction\n"
            "backoff.jitter_fraction: 0.2\n"
            "rate.window: 90s\n"
            "rate.per_message: 4\n"
            "rate.outage_ratio: 0.25\n"
            "rate.min_messages: 50\n"
            "rate.max_outage: 2h\n"
            "dead_letter.via: reject\n"
            "dead_letter.exchange: dlx\n"
            "dead_letter.routing_key: dead.{queue}\n"
            "broker_delivery_limit: auto\n"
            "queue_type: same\n"
            "ack_timeout: off\n");
}

TEST(Describe, ZeroDurationAndEmptyIdentity) {
  Policy policy;
  policy.backoff.initial = Millis(0);
  policy.identity.clear();
  const std::string text = describe(policy);
  EXPECT_NE(text.find("backoff.initial: 0ms\n"), std::string::npos) << text;
  EXPECT_NE(text.find("identity: []\n"), std::string::npos) << text;
  EXPECT_NE(text.find("source: \"\"\n"), std::string::npos) << text;
}

}  // namespace
}  // namespace nackguard::retry
