// When the proxy cannot complete a copy (refused, unroutable, not confirmed in time, its
// channel closed, the body not kept), it gives the message back to the broker the way the
// consumer asked, under the broker's tag, and reports the fallback with its cause.

#include <gtest/gtest.h>

#include "session/guard_script.hpp"

namespace nackguard::session::guard_test {
namespace {

class GuardFallback : public GuardTest {
 protected:
  // max_redeliveries 0: the first nack of m1 (broker tag 1) is to be dead-lettered; the
  // proxy's channel is opened and the DLQ found; returns what the proxy sent next.
  std::vector<Wire> dead_letter_first_nack(const retry::Policy& p = policy(0)) {
    start(p);
    deliver_passes(delivery(1, message("m1")));
    now += 1000;
    client(nack(kCh, 1));
    EXPECT_EQ(open_proxy_channel(), frames({method(kProxyChannel, passive_declare("q.dlq"))}));
    broker(declare_ok("q.dlq"));
    return to_broker();
  }

  void expect_one_fallback(retry::FallbackCause cause, const std::string& detail) {
    ASSERT_EQ(listener.fallbacks.size(), 1u);
    EXPECT_EQ(listener.fallbacks[0].queue, "q");
    EXPECT_EQ(listener.fallbacks[0].cause, cause);
    EXPECT_EQ(listener.fallbacks[0].detail, detail);
    EXPECT_TRUE(listener.dead_letters.empty());
    EXPECT_EQ(listener.requeues, std::vector<retry::Action>{retry::Action::forward});
  }
};

TEST_F(GuardFallback, RefusedCopyGivesTheConsumersNackToTheBroker) {
  std::vector<Wire> sent = dead_letter_first_nack();
  EXPECT_EQ(take_copy(sent).frames, sent.size());
  refuse(1);
  EXPECT_EQ(to_broker(), frames({nack(kCh, 1)}));
  expect_one_fallback(retry::FallbackCause::republish_failed,
                      "the broker refused the copy (basic.nack)");
  EXPECT_TRUE(client_bytes().empty());
  // The count stays: it was not dead-lettered.
  ASSERT_TRUE(tracked("m1"));
  EXPECT_EQ(tracked("m1")->returns, 1u);
}

TEST_F(GuardFallback, RefusedCopyOfARejectGivesTheRejectBack) {
  start(policy(0));
  deliver_passes(delivery(1, message("m1")));
  client(reject(kCh, 1));
  open_proxy_channel();
  broker(declare_ok("q.dlq"));
  to_broker();
  refuse(1);
  EXPECT_EQ(to_broker(), frames({reject(kCh, 1)}));
  ASSERT_EQ(listener.fallbacks.size(), 1u);
}

TEST_F(GuardFallback, AccessRefusedOnTheDeclareFallsBack) {
  start(policy(0));
  deliver_passes(delivery(1, message("m1")));
  client(nack(kCh, 1));
  EXPECT_EQ(open_proxy_channel(), frames({method(kProxyChannel, passive_declare("q.dlq"))}));
  const std::string refused =
      "ACCESS_REFUSED - access to queue 'q.dlq' in vhost '/' refused for user 'guest'";
  broker(channel_close(403, refused, 50, 10));
  // The proxy answers the close. Its channel is reopened (the publish is still queued), and
  // once ready the queue is known to have failed: the consumer's nack goes through.
  EXPECT_EQ(to_broker(), frames({method(kProxyChannel, amqp::ChannelCloseOk{}),
                                 method(kProxyChannel, amqp::ChannelOpen{})}));
  broker(method(kProxyChannel, amqp::ChannelOpenOk{}));
  EXPECT_EQ(to_broker(), frames({method(kProxyChannel, amqp::ConfirmSelect{})}));
  broker(method(kProxyChannel, amqp::ConfirmSelectOk{}));
  EXPECT_EQ(to_broker(), frames({nack(kCh, 1)}));
  expect_one_fallback(retry::FallbackCause::republish_failed,
                      "cannot declare queue q.dlq: " + refused);

  // For 30 s the queue's copies are known to fail: the next return over the limit is not
  // taken over at all, and its nack passes as the client sent it.
  deliver_passes(delivery(2, message("m2")));
  now += 29999;
  client_passes(nack(kCh, 2));
  ASSERT_EQ(listener.fallbacks.size(), 2u);
  EXPECT_EQ(listener.fallbacks[1].cause, retry::FallbackCause::republish_failed);
  EXPECT_EQ(listener.fallbacks[1].detail,
            "copies for this queue failed moments ago (see the earlier fallback line)");

  // After 30 s the DLQ is tried again, passively as at first.
  deliver_passes(delivery(3, message("m3")));
  now += 1;
  client(nack(kCh, 3));
  EXPECT_EQ(to_broker(), frames({method(kProxyChannel, passive_declare("q.dlq"))}));
  EXPECT_EQ(listener.fallbacks.size(), 2u);
}

TEST_F(GuardFallback, AccessRefusedOnTheProxysOwnDeclarationFallsBack) {
  start(policy(0));
  deliver_passes(delivery(1, message("m1")));
  client(nack(kCh, 1));
  open_proxy_channel();
  broker(channel_close(404, "NOT_FOUND - no queue 'q.dlq' in vhost '/'", 50, 10));
  EXPECT_EQ(reopen_proxy_channel(), frames({method(kProxyChannel, durable_declare("q.dlq"))}));
  broker(channel_close(403, "ACCESS_REFUSED - configure access refused", 50, 10));
  EXPECT_EQ(reopen_proxy_channel(), frames({nack(kCh, 1)}));
  ASSERT_EQ(listener.fallbacks.size(), 1u);
  EXPECT_EQ(listener.fallbacks[0].detail,
            "cannot declare queue q.dlq: ACCESS_REFUSED - configure access refused");
}

TEST_F(GuardFallback, NoConfirmWithinTheTimeoutFallsBackAndALateConfirmDoesNothing) {
  std::vector<Wire> sent = dead_letter_first_nack();
  EXPECT_EQ(take_copy(sent).frames, sent.size());
  // The deadline counts from the nack that started the copy (kT0 + 1000).
  now = kT0 + 1000 + 29999;
  conn->session.on_tick(now);
  EXPECT_TRUE(broker_bytes().empty());
  EXPECT_TRUE(listener.fallbacks.empty());

  now += 1;
  conn->session.on_tick(now);
  EXPECT_EQ(to_broker(), frames({nack(kCh, 1)}));
  expect_one_fallback(retry::FallbackCause::republish_failed, "no publisher confirm in time");

  // The confirm comes after all: the original was given back already; nothing is acked.
  confirm(1);
  EXPECT_TRUE(broker_bytes().empty());
  EXPECT_TRUE(listener.dead_letters.empty());
  EXPECT_EQ(listener.fallbacks.size(), 1u);
}

TEST_F(GuardFallback, ChannelNeverOpeningTimesOutToo) {
  start(policy(0));
  deliver_passes(delivery(1, message("m1")));
  client(nack(kCh, 1));
  EXPECT_EQ(to_broker(), frames({method(kProxyChannel, amqp::ChannelOpen{})}));
  now += 30000;
  conn->session.on_tick(now);
  EXPECT_EQ(to_broker(), frames({nack(kCh, 1)}));
  expect_one_fallback(retry::FallbackCause::republish_failed,
                      "the proxy's channel or queue declaration did not complete in time");
}

TEST_F(GuardFallback, ChannelClosedWithTheCopyInFlightFallsBack) {
  std::vector<Wire> sent = dead_letter_first_nack();
  EXPECT_EQ(take_copy(sent).frames, sent.size());
  broker(channel_close(406, "PRECONDITION_FAILED - something", 60, 40));
  // The nack (the settlements come first), then the close-ok; nothing else waits, so the
  // channel stays closed.
  EXPECT_EQ(to_broker(), frames({nack(kCh, 1), method(kProxyChannel, amqp::ChannelCloseOk{})}));
  expect_one_fallback(retry::FallbackCause::republish_failed,
                      "the proxy's channel was closed: PRECONDITION_FAILED - something");
  // A later confirm with the old number means nothing.
  confirm(1);
  EXPECT_TRUE(broker_bytes().empty());
}

TEST_F(GuardFallback, ConnectionEndingWithTheCopyInFlightIsNoFailureOfTheQueuesCopies) {
  std::vector<Wire> sent = dead_letter_first_nack();
  EXPECT_EQ(take_copy(sent).frames, sent.size());
  connection_lost();  // the broker side goes away before it confirms the copy
  EXPECT_TRUE(listener.fallbacks.empty());

  // Another connection on the same queue: its first nack over the limit is copied at once.
  connect();
  deliver_passes(delivery(1, message("m2")));
  client(nack(kCh, 1));
  EXPECT_EQ(open_proxy_channel(), frames({method(kProxyChannel, passive_declare("q.dlq"))}));
  broker(declare_ok("q.dlq"));
  sent = to_broker();
  EXPECT_EQ(take_copy(sent).publish.routing_key, "q.dlq");
  EXPECT_TRUE(listener.fallbacks.empty());
  confirm(1);
  EXPECT_EQ(to_broker(), frames({ack(kCh, 1)}));
  ASSERT_EQ(listener.dead_letters.size(), 1u);
}

TEST_F(GuardFallback, UnroutableCopyFallsBack) {
  retry::Policy p = policy(0);
  p.dead_letter.exchange = "dlx";
  start(p);
  deliver_passes(delivery(1, message("m1")));
  client(nack(kCh, 1));
  Copy copy = only_copy(open_proxy_channel());
  // The mandatory copy comes back, its content too, before its confirm.
  broker(no_route("dlx", "q.dlq", copy.header.properties, {amqp::as_chars(copy.body)}));
  EXPECT_TRUE(broker_bytes().empty());
  EXPECT_TRUE(client_bytes().empty());
  confirm(1);
  EXPECT_EQ(to_broker(), frames({nack(kCh, 1)}));
  expect_one_fallback(retry::FallbackCause::republish_failed,
                      "the copy was unroutable: exchange \"dlx\" has no binding for \"q.dlq\"");
}

// The budget holds the delivery's record (its header and names, counted too) but not its
// 4000-byte body.
constexpr std::uint64_t kRoomForARecordOnly = 2048;
Message with_big_body(Message m) {
  m.body = std::string(4000, 'b');
  return m;
}

TEST_F(GuardFallback, BodyOverTheBudgetIsNotRetainedAndTheNackPasses) {
  retry::GuardSettings settings;
  settings.retained_body_bytes = kRoomForARecordOnly;
  start(policy(0), settings, /*sessions_use_budget=*/true);
  deliver_passes(delivery(1, with_big_body(message("m1"))));
  client_passes(nack(kCh, 1));
  ASSERT_EQ(listener.fallbacks.size(), 1u);
  EXPECT_EQ(listener.fallbacks[0].cause, retry::FallbackCause::body_not_retained);
  EXPECT_EQ(listener.requeues, std::vector<retry::Action>{retry::Action::forward});
  EXPECT_TRUE(listener.dead_letters.empty());
  EXPECT_GE(context->budget().refusals(), 1u);
  EXPECT_EQ(context->budget().used(), 0u);
}

// A republish ahead of the broker's limit (a limit of 0: the first return passes it) without
// its body: the fallback says the broker may now end the message, not that nothing is lost.
TEST_F(GuardFallback, RepublishAtTheBrokersLimitWithoutItsBodyFallsBackAsAtBrokerLimit) {
  retry::GuardSettings settings;
  settings.retained_body_bytes = kRoomForARecordOnly;
  retry::Policy p = policy(10);
  p.broker_delivery_limit = {retry::BrokerDeliveryLimit::Kind::fixed, 0};
  start(p, settings, /*sessions_use_budget=*/true);
  deliver_passes(delivery(1, with_big_body(message("m1"))));
  client_passes(nack(kCh, 1));
  ASSERT_EQ(listener.fallbacks.size(), 1u);
  EXPECT_TRUE(listener.fallbacks[0].at_broker_limit);
  EXPECT_EQ(listener.fallbacks[0].cause, retry::FallbackCause::body_not_retained);
  EXPECT_EQ(listener.fallbacks[0].detail,
            "the body could not be kept within limits.retained_body_bytes");
  EXPECT_EQ(listener.requeues, std::vector<retry::Action>{retry::Action::forward});
}

TEST_F(GuardFallback, ViaRejectNeedsNoBodyAndIgnoresTheBodyBudget) {
  retry::GuardSettings settings;
  settings.retained_body_bytes = kRoomForARecordOnly;
  retry::Policy p = policy(0);
  p.dead_letter.via = retry::DeadLetter::Via::reject;
  start(p, settings, /*sessions_use_budget=*/true);
  deliver_passes(delivery(1, with_big_body(message("m1"))));
  client(nack(kCh, 1));
  EXPECT_EQ(to_broker(), frames({reject(kCh, 1, false)}));
  EXPECT_TRUE(listener.fallbacks.empty());
  EXPECT_EQ(listener.dead_letters.size(), 1u);
}

TEST_F(GuardFallback, BrokerWithOneChannelLeavesNoneForTheProxy) {
  start(policy(0));
  connect(/*channel_max=*/1);
  deliver_passes(delivery(1, message("m1")));
  client_passes(nack(kCh, 1));
  ASSERT_EQ(listener.fallbacks.size(), 1u);
  EXPECT_EQ(listener.fallbacks[0].cause, retry::FallbackCause::no_channel);
  EXPECT_EQ(listener.fallbacks[0].detail,
            "the broker's channel_max leaves no channel for the proxy");
}

TEST_F(GuardFallback, ViaRejectWorksWithoutAProxyChannel) {
  retry::Policy p = policy(0);
  p.dead_letter.via = retry::DeadLetter::Via::reject;
  start(p);
  connect(/*channel_max=*/1);
  deliver_passes(delivery(1, message("m1")));
  client(nack(kCh, 1));
  EXPECT_EQ(to_broker(), frames({reject(kCh, 1, false)}));
  EXPECT_TRUE(listener.fallbacks.empty());
}

TEST_F(GuardFallback, AfterAFailedCopyTheQueueGoesWithoutCopiesFor30Seconds) {
  dead_letter_first_nack();  // at kT0 + 1000
  refuse(1);
  EXPECT_EQ(to_broker(), frames({nack(kCh, 1)}));

  // Its count (1) is over max 0, but copies for "q" fail: rather than taking the redelivery
  // from the consumer and handing it straight back to the broker, the proxy lets it through.
  const Message m1 = message("m1");
  deliver_passes(delivery(2, m1, true));
  now = kT0 + 1000 + 29999;
  client_passes(nack(kCh, 2));
  ASSERT_EQ(listener.fallbacks.size(), 2u);
  EXPECT_EQ(listener.fallbacks[1].detail,
            "copies for this queue failed moments ago (see the earlier fallback line)");
  EXPECT_EQ(tracked("m1")->returns, 2u);

  // 30 s after the failure: copies work again. Its count alone (2, over max 0) does not
  // dead-letter the redelivery before the consumer sees it (that count may hold returns that
  // were no fault of the message: retry::decide_delivery); its next return does.
  now += 1;
  deliver_passes(delivery(3, m1, true));
  client(nack(kCh, 3));
  std::vector<Wire> sent = to_broker();
  Copy copy = take_copy(sent);
  EXPECT_EQ(copy.frames, sent.size());
  EXPECT_EQ(copy.publish.routing_key, "q.dlq");
  EXPECT_EQ(copy.header_text("x-nackguard-returns"), text(amqp::FieldValue::i64(3)));
  confirm(2);
  EXPECT_EQ(to_broker(), frames({ack(kCh, 3)}));
  EXPECT_EQ(
      listener.dead_letters,
      (std::vector<Dl>{{"q", "message_id:m1", 3, retry::DeadLetterReason::max_redeliveries}}));
}

}  // namespace
}  // namespace nackguard::session::guard_test
