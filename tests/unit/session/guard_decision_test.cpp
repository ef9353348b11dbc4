// The guard alone, as the session meets it: no Session, no handshake, no frames. A delivery in,
// a plan out; a return in, a decision out (a TakeOver, with its copy and the Ticket that carries
// what the guard will need); an outcome in, a settlement out, booked in the listener only then.

#include <gtest/gtest.h>

#include <memory>
#include <optional>

#include "proxy/guard/guard.hpp"
#include "session/guard_listener.hpp"
#include "session/guard_messages.hpp"

namespace nackguard::session::guard_test {
namespace {

class GuardDecision : public ::testing::Test {
 protected:
  // A guard on a connection to RabbitMQ 4.3.6 that reserved channel kProxyChannel.
  void start(const retry::Policy& p) {
    context = std::make_unique<retry::GuardContext>(
        retry::GuardSettings{},
        std::make_shared<const retry::PolicySet>(std::vector<retry::Policy>{p}), &listener,
        retry::GuardClocks{[this] { return now; }, [this] { return now; }});
    guard = std::make_unique<Guard>(*context, 1);
    guard->on_open({"/", kProxyChannel, 131072, "4.3.6", "test-client"});
  }
  // `m` delivered (its plan asked of the guard) and handed to the client.
  Delivery deliver(std::uint64_t tag, const Message& m, bool redelivered = false) {
    Delivery d = delivery_value(tag, m, redelivered);
    const DeliveryPlan plan = guard->on_delivery(d);
    EXPECT_EQ(plan.action, DeliveryPlan::Action::forward);
    d.cookie = plan.cookie;
    return d;
  }
  static retry::Policy delayed(std::uint32_t max_redeliveries) {
    retry::Policy p = policy(max_redeliveries);
    p.requeue = retry::RequeueMode::delayed;
    return p;
  }

  std::int64_t now = kT0;
  RecordingListener listener;
  std::unique_ptr<retry::GuardContext> context;
  std::unique_ptr<Guard> guard;
};

TEST_F(GuardDecision, ANackUnderADelayedPolicyIsACopyToTheDelayQueueBookedAtItsOutcome) {
  start(delayed(5));
  const Delivery d = deliver(1, message("m1"));
  std::optional<TakeOver> take_over = guard->on_client_return(d, ReturnCause::nack);
  ASSERT_TRUE(take_over.has_value());
  ASSERT_TRUE(take_over->copy.has_value());
  const PublishRequest& copy = *take_over->copy;
  EXPECT_EQ(copy.exchange, "");
  EXPECT_EQ(copy.routing_key, "nackguard.delay.q.1000ms");
  ASSERT_TRUE(copy.ensure.has_value());
  EXPECT_EQ(copy.ensure->name, "nackguard.delay.q.1000ms");
  ASSERT_NE(copy.body, nullptr);
  EXPECT_EQ(copy.body->bytes, bytes_of(message("m1").body));
  EXPECT_EQ(copy.deadline_ms, now + 30000);
  const Ticket& t = take_over->ticket();
  EXPECT_EQ(t.channel, kCh);
  EXPECT_EQ(t.broker_tag, 1u);
  EXPECT_EQ(t.job, 1u);
  EXPECT_EQ(t.queue, kQueue);
  EXPECT_EQ(t.identity, "message_id:m1");
  EXPECT_EQ(t.decision.action, retry::Action::delay);
  EXPECT_EQ(t.decision.returns, 1u);
  EXPECT_EQ(t.fallback, SettleKind::nack);
  EXPECT_FALSE(t.via_reject);
  // Nothing is booked before the copy's outcome.
  EXPECT_TRUE(listener.requeues.empty());

  const Settle s = guard->on_outcome({t, retry::FallbackCause::none, ""});
  EXPECT_EQ(s.channel, kCh);
  EXPECT_EQ(s.broker_tag, 1u);
  EXPECT_EQ(s.kind, SettleKind::ack);
  EXPECT_FALSE(s.requeue);
  EXPECT_EQ(listener.requeues, std::vector<retry::Action>{retry::Action::delay});
  EXPECT_TRUE(listener.fallbacks.empty());
}

TEST_F(GuardDecision, AFailedCopyGivesTheMessageBackAsTheConsumerAskedAndPausesCopies) {
  start(delayed(5));
  const Delivery d = deliver(1, message("m1"));
  const std::optional<TakeOver> take_over = guard->on_client_return(d, ReturnCause::reject);
  ASSERT_TRUE(take_over.has_value());
  EXPECT_EQ(take_over->ticket().fallback, SettleKind::reject);
  const Settle s = guard->on_outcome(
      {take_over->ticket(), retry::FallbackCause::republish_failed, "the broker refused it"});
  EXPECT_EQ(s.kind, SettleKind::reject);
  EXPECT_TRUE(s.requeue);
  EXPECT_EQ(listener.requeues, std::vector<retry::Action>{retry::Action::forward});
  ASSERT_EQ(listener.fallbacks.size(), 1u);
  EXPECT_EQ(listener.fallbacks[0].cause, retry::FallbackCause::republish_failed);
  EXPECT_EQ(listener.fallbacks[0].detail, "the broker refused it");
  // The queue's copies are failing: the next return is forwarded, and says why.
  const Delivery again = deliver(2, message("m2"));
  EXPECT_FALSE(guard->on_client_return(again, ReturnCause::nack).has_value());
  ASSERT_EQ(listener.fallbacks.size(), 2u);
  EXPECT_EQ(listener.fallbacks[1].cause, retry::FallbackCause::republish_failed);
}

TEST_F(GuardDecision, ADeadLetterThroughTheBrokersRejectHasNoCopyAndIsBookedAtItsOutcome) {
  retry::Policy p = policy(0);
  p.dead_letter.via = retry::DeadLetter::Via::reject;
  start(p);
  const Delivery d = deliver(1, message("m1"));
  const std::optional<TakeOver> take_over = guard->on_client_return(d, ReturnCause::nack);
  ASSERT_TRUE(take_over.has_value());
  EXPECT_FALSE(take_over->copy.has_value());
  EXPECT_TRUE(take_over->ticket().via_reject);
  EXPECT_EQ(take_over->at_once.failure, retry::FallbackCause::none);
  EXPECT_TRUE(listener.dead_letters.empty());

  const Settle s = guard->on_outcome(take_over->at_once);
  EXPECT_EQ(s.kind, SettleKind::reject);
  EXPECT_FALSE(s.requeue);
  ASSERT_EQ(listener.dead_letters.size(), 1u);
  EXPECT_EQ(listener.dead_letters[0],
            (RecordingListener::DeadLettered{kQueue, "message_id:m1", 1,
                                             retry::DeadLetterReason::max_redeliveries}));
  // The message's count is gone with it.
  EXPECT_FALSE(context->tracker().find(retry::make_key(kQueue, "message_id:m1"), now));
}

TEST_F(GuardDecision, ABodyNotKeptMakesNoCopyAndSaysWhy) {
  start(delayed(5));
  Delivery d = deliver(1, message("m1"));
  d.body.reset();  // past the body budget
  EXPECT_FALSE(guard->on_client_return(d, ReturnCause::nack).has_value());
  EXPECT_EQ(listener.requeues, std::vector<retry::Action>{retry::Action::forward});
  ASSERT_EQ(listener.fallbacks.size(), 1u);
  EXPECT_EQ(listener.fallbacks[0].cause, retry::FallbackCause::body_not_retained);
}

TEST_F(GuardDecision, AReturnWithinTheLimitUnderAnImmediatePolicyIsForwarded) {
  start(policy(5));
  const Delivery d = deliver(1, message("m1"));
  EXPECT_FALSE(guard->on_client_return(d, ReturnCause::nack).has_value());
  EXPECT_EQ(listener.requeues, std::vector<retry::Action>{retry::Action::forward});
}

}  // namespace
}  // namespace nackguard::session::guard_test
