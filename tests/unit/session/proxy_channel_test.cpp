// The proxy's own channel, alone: frames out through `send`, broker frames in through
// on_frame, and exactly one `done` per publish. Publishes, confirms and declarations;
// proxy_channel_limits_test.cpp has frame sizes, deadlines and encoding.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "session/proxy_channel_fixture.hpp"

namespace nackguard::session::guard_test {
namespace {

TEST_F(ProxyChannelTest, OpensSelectsAndDeclaresBeforeTheFirstPublish) {
  PublishRequest first = request(1), second = request(2);
  publish(first);
  EXPECT_EQ(channel.outstanding(), 1u);
  publish(second);  // waits behind the first: nothing more is sent while opening
  EXPECT_EQ(take_sent(), frames({method(kProxyChannel, amqp::ChannelOpen{})}));
  feed(method(kProxyChannel, amqp::ChannelOpenOk{}));
  EXPECT_EQ(take_sent(), frames({method(kProxyChannel, amqp::ConfirmSelect{})}));
  feed(method(kProxyChannel, amqp::ConfirmSelectOk{}));
  EXPECT_EQ(take_sent(), frames({declare(first)}));
  feed(declare_ok("dq"));
  EXPECT_EQ(take_sent(), frames({publish_frames(first), publish_frames(second)}));
  EXPECT_TRUE(done.empty());
  EXPECT_EQ(channel.outstanding(), 2u);
}

TEST_F(ProxyChannelTest, UseExistingDeclaresPassivelyAndOwnDeclarationOnlyIfAbsent) {
  PublishRequest r = existing_dlq_request(1);
  publish(r);
  open();
  EXPECT_EQ(take_sent(), frames({method(kProxyChannel, passive_declare("q.dlq"))}));
  feed(channel_close(404, "NOT_FOUND - no queue 'q.dlq' in vhost '/'", 50, 10));
  EXPECT_EQ(take_sent(), frames({method(kProxyChannel, amqp::ChannelCloseOk{}),
                                 method(kProxyChannel, amqp::ChannelOpen{})}));
  EXPECT_TRUE(done.empty());
  feed(method(kProxyChannel, amqp::ChannelOpenOk{}));
  take_sent();
  feed(method(kProxyChannel, amqp::ConfirmSelectOk{}));
  EXPECT_EQ(take_sent(), frames({method(kProxyChannel, durable_declare("q.dlq"))}));
  feed(declare_ok("q.dlq"));
  EXPECT_EQ(take_sent(), frames({publish_frames(r)}));
  feed(method(kProxyChannel, amqp::BasicAck{1, false}));
  EXPECT_EQ(take_done(), std::vector<Done>{ok(1)});
}

TEST_F(ProxyChannelTest, OneMultipleAckConfirmsSeveralPipelinedJobs) {
  for (std::uint64_t job = 1; job <= 4; ++job) publish(request(job));
  open();
  EXPECT_EQ(take_sent(), frames({declare(request(1))}));
  feed(declare_ok("dq"));
  EXPECT_EQ(take_sent().size(), 4u * 3u);  // four publishes of method, header and body
  feed(method(kProxyChannel, amqp::BasicAck{3, true}));
  EXPECT_EQ(take_done(), (std::vector<Done>{ok(1), ok(2), ok(3)}));
  EXPECT_EQ(channel.outstanding(), 1u);
  feed(method(kProxyChannel, amqp::BasicAck{3, false}));  // already confirmed: nothing
  EXPECT_TRUE(done.empty());
  feed(method(kProxyChannel, amqp::BasicAck{4, false}));
  EXPECT_EQ(take_done(), std::vector<Done>{ok(4)});
  EXPECT_EQ(channel.outstanding(), 0u);
}

TEST_F(ProxyChannelTest, MultipleNackFailsEveryJobUpToIt) {
  for (std::uint64_t job = 1; job <= 3; ++job) publish(to_exchange(job, "k"));
  open();
  EXPECT_EQ(take_sent().size(), 3u * 3u);
  feed(method(kProxyChannel, amqp::BasicNack{2, true, false}));
  const std::string why = "the broker refused the copy (basic.nack)";
  EXPECT_EQ(take_done(), (std::vector<Done>{failed(1, why), failed(2, why)}));
  feed(method(kProxyChannel, amqp::BasicAck{3, false}));
  EXPECT_EQ(take_done(), std::vector<Done>{ok(3)});
}

TEST_F(ProxyChannelTest, ReturnBeforeTheAckFailsThatJobAsUnroutable) {
  publish(to_exchange(1, "nowhere"));
  publish(to_exchange(2, "bound"));
  open();
  EXPECT_EQ(take_sent().size(), 2u * 3u);
  amqp::BasicProperties props;
  props.message_id = "m1";
  // The returned content, its body in two frames, then one ack for both publishes.
  feed(cat({no_route("x", "nowhere", props, {"co", "py"}),
            method(kProxyChannel, amqp::BasicAck{2, true})}));
  EXPECT_EQ(take_done(),
            (std::vector<Done>{
                failed(1, "the copy was unroutable: exchange \"x\" has no binding for \"nowhere\""),
                ok(2)}));
  EXPECT_TRUE(take_sent().empty());
}

// Two copies to the same exchange and routing key, one returned: RabbitMQ sends a publish's
// basic.return before its basic.ack and handles a channel's publishes in order, so the return
// is the first one's. Only that job fails; the second was routed (a binding came in between).
TEST_F(ProxyChannelTest, OneReturnFailsOnlyTheOldestPublishToThatAddress) {
  publish(to_exchange(1, "k"));
  publish(to_exchange(2, "k"));
  publish(to_exchange(3, "k"));
  open();
  EXPECT_EQ(take_sent().size(), 3u * 3u);
  const Bytes returned_content = no_route("x", "k", {}, {"copy"});
  const std::string unroutable = "the copy was unroutable: exchange \"x\" has no binding for \"k\"";
  feed(cat({returned_content, method(kProxyChannel, amqp::BasicAck{1, false}),
            method(kProxyChannel, amqp::BasicAck{2, false})}));
  EXPECT_EQ(take_done(), (std::vector<Done>{failed(1, unroutable), ok(2)}));
  // The third is returned too, then acked: that return is its own.
  feed(cat({returned_content, method(kProxyChannel, amqp::BasicAck{3, false})}));
  EXPECT_EQ(take_done(), (std::vector<Done>{failed(3, unroutable)}));
}

// A queue the channel declared (or found) once is taken to exist for the channel's life. If
// it is deleted (by an operator, or by its own x-expires), copies to it by the default
// exchange come back unroutable; the next copy should check the queue again rather than be
// published into the void again, or a long-lived connection never dead-letters again.
TEST_F(ProxyChannelTest, UnroutableCopyToAnEnsuredQueueDeclaresItAgain) {
  PublishRequest r = existing_dlq_request(1);
  publish(r);
  open();
  EXPECT_EQ(take_sent(), frames({method(kProxyChannel, passive_declare("q.dlq"))}));
  feed(declare_ok("q.dlq"));
  EXPECT_EQ(take_sent(), frames({publish_frames(r)}));

  feed(cat({no_route("", "q.dlq", r.header.properties, {"copy"}),
            method(kProxyChannel, amqp::BasicAck{1, false})}));
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(take_done()[0].failure, retry::FallbackCause::republish_failed);

  PublishRequest next = existing_dlq_request(2);
  publish(next);
  EXPECT_EQ(take_sent(), frames({method(kProxyChannel, passive_declare("q.dlq"))}));
}

TEST_F(ProxyChannelTest, ChannelCloseFailsEveryJobInFlightAndTheNextJobReopens) {
  publish(to_exchange(1, "a"));
  publish(to_exchange(2, "b"));
  open();
  take_sent();
  feed(channel_close(406, "PRECONDITION_FAILED - fast reply consumer does not exist", 60, 40));
  EXPECT_EQ(take_sent(), frames({method(kProxyChannel, amqp::ChannelCloseOk{})}));
  const std::string why =
      "the proxy's channel was closed: PRECONDITION_FAILED - fast reply consumer does not exist";
  EXPECT_EQ(take_done(), (std::vector<Done>{failed(1, why), failed(2, why)}));
  EXPECT_EQ(channel.outstanding(), 0u);

  // Nothing waits: the channel stays closed until the next job.
  PublishRequest third = to_exchange(3, "c");
  publish(third);
  open();
  EXPECT_EQ(take_sent(), frames({publish_frames(third)}));
  // Publish sequence numbers start again at 1 on the new channel.
  feed(method(kProxyChannel, amqp::BasicAck{1, false}));
  EXPECT_EQ(take_done(), std::vector<Done>{ok(3)});
}

TEST_F(ProxyChannelTest, QueueWithOtherArgumentsIsUsedAsItIs) {
  PublishRequest in_flight = to_exchange(1, "a");
  publish(in_flight);
  open();
  take_sent();
  PublishRequest second = request(2, "dq");
  publish(second);
  // The declaration may close the channel (406 below): it waits for the publish in flight,
  // which would be lost with it.
  EXPECT_TRUE(take_sent().empty());
  feed(method(kProxyChannel, amqp::BasicAck{1, false}));
  EXPECT_EQ(take_done(), std::vector<Done>{ok(1)});
  EXPECT_EQ(take_sent(), frames({declare(second)}));
  const std::string why = "PRECONDITION_FAILED - inequivalent arg 'x-message-ttl'";
  feed(channel_close(406, why, 50, 10));
  // Nothing was in flight to lose; the waiting job needs a new channel.
  EXPECT_EQ(take_sent(), frames({method(kProxyChannel, amqp::ChannelCloseOk{}),
                                 method(kProxyChannel, amqp::ChannelOpen{})}));
  EXPECT_TRUE(take_done().empty());
  feed(method(kProxyChannel, amqp::ChannelOpenOk{}));
  take_sent();
  feed(method(kProxyChannel, amqp::ConfirmSelectOk{}));
  // The queue exists with other arguments: a passive declare checks it is there, then it is
  // used as it is, and told once.
  EXPECT_EQ(take_sent(), frames({method(kProxyChannel, passive_declare("dq"))}));
  EXPECT_TRUE(notices.empty());
  feed(declare_ok("dq"));
  EXPECT_EQ(take_sent(), frames({publish_frames(second)}));
  EXPECT_EQ(notices, (std::vector<std::pair<std::string, std::string>>{{"dq", why}}));
  feed(method(kProxyChannel, amqp::BasicAck{1, false}));
  EXPECT_EQ(take_done(), std::vector<Done>{ok(2)});
  // Later copies to it need no declaration (and tell nothing more).
  PublishRequest third = request(3, "dq");
  publish(third);
  EXPECT_EQ(take_sent(), frames({publish_frames(third)}));
  EXPECT_EQ(notices.size(), 1u);
}

TEST_F(ProxyChannelTest, APassiveDeclareWaitsForThePublishesInFlight) {
  // The passive check of a DLQ closes the channel when the DLQ is absent: a copy still in
  // flight would be lost with it (and its queue's copies stopped for 30 s). It waits instead.
  PublishRequest delayed = to_exchange(1, "a");
  publish(delayed);
  open();
  EXPECT_EQ(take_sent(), frames({publish_frames(delayed)}));
  PublishRequest dead = request(2, "q.dlq");
  dead.ensure->use_existing = true;
  publish(dead);
  EXPECT_TRUE(take_sent().empty());
  feed(method(kProxyChannel, amqp::BasicAck{1, false}));
  EXPECT_EQ(take_done(), std::vector<Done>{ok(1)});
  EXPECT_EQ(take_sent(), frames({method(kProxyChannel, passive_declare("q.dlq"))}));
  feed(channel_close(404, "NOT_FOUND - no queue 'q.dlq' in vhost '/'", 50, 10));
  EXPECT_TRUE(take_done().empty());  // nothing was in flight to lose
}

TEST_F(ProxyChannelTest, QueueUsedAsItIsButGoneIsDeclaredAgain) {
  PublishRequest first = request(1, "dq");
  publish(first);
  open();
  EXPECT_EQ(take_sent(), frames({declare(first)}));
  // Reopens the channel and checks the queue is there: `reopen` answers the channel's
  // channel.open and confirm.select and returns what it sent next.
  auto reopen = [&] {
    EXPECT_EQ(take_sent(), frames({method(kProxyChannel, amqp::ChannelCloseOk{}),
                                   method(kProxyChannel, amqp::ChannelOpen{})}));
    feed(method(kProxyChannel, amqp::ChannelOpenOk{}));
    EXPECT_EQ(take_sent(), frames({method(kProxyChannel, amqp::ConfirmSelect{})}));
    feed(method(kProxyChannel, amqp::ConfirmSelectOk{}));
    return take_sent();
  };
  feed(channel_close(406, "PRECONDITION_FAILED - inequivalent arg 'x-queue-type'", 50, 10));
  EXPECT_EQ(reopen(), frames({method(kProxyChannel, passive_declare("dq"))}));
  // Deleted meanwhile: the passive declare finds nothing, so the queue is declared as asked.
  feed(channel_close(404, "NOT_FOUND - no queue 'dq'", 50, 10));
  EXPECT_EQ(reopen(), frames({declare(first)}));
  feed(declare_ok("dq"));
  EXPECT_EQ(take_sent(), frames({publish_frames(first)}));
  EXPECT_TRUE(notices.empty());
  EXPECT_TRUE(take_done().empty());
}

TEST_F(ProxyChannelTest, QueueIsDeclaredAgainAfterRedeclareAfterMs) {
  PublishRequest r1 = request(1);
  r1.ensure->redeclare_after_ms = 1000;
  publish(r1);
  open();
  EXPECT_EQ(take_sent(), frames({declare(r1)}));
  feed(declare_ok("dq"));
  EXPECT_EQ(take_sent(), frames({publish_frames(r1)}));

  now += 999;
  PublishRequest r2 = request(2);
  r2.ensure->redeclare_after_ms = 1000;
  publish(r2);
  EXPECT_EQ(take_sent(), frames({publish_frames(r2)}));

  now += 1;
  PublishRequest r3 = request(3);
  r3.ensure->redeclare_after_ms = 1000;
  publish(r3);
  // The declaration waits for the copies in flight (it could close the channel under them).
  EXPECT_TRUE(take_sent().empty());
  feed(method(kProxyChannel, amqp::BasicAck{2, true}));
  EXPECT_EQ(take_done(), (std::vector<Done>{ok(1), ok(2)}));
  EXPECT_EQ(take_sent(), frames({declare(r3)}));
  feed(declare_ok("dq"));
  EXPECT_EQ(take_sent(), frames({publish_frames(r3)}));

  // Without redeclare_after_ms, one declaration per channel is enough.
  now += 100000;
  PublishRequest r4 = request(4);
  publish(r4);
  EXPECT_EQ(take_sent(), frames({publish_frames(r4)}));
}

TEST_F(ProxyChannelTest, FailedQueueIsNotTriedAgainFor30Seconds) {
  publish(request(1));
  open();
  take_sent();
  const std::string refused = "ACCESS_REFUSED - access to queue 'dq' in vhost '/' refused";
  feed(channel_close(403, refused, 50, 10));
  take_sent();  // close-ok, and an open for the job still waiting
  feed(method(kProxyChannel, amqp::ChannelOpenOk{}));
  feed(method(kProxyChannel, amqp::ConfirmSelectOk{}));
  take_sent();
  EXPECT_EQ(take_done(), (std::vector<Done>{failed(1, "cannot declare queue dq: " + refused)}));

  // Another job for it within 30 s fails at once, without a frame; others go on.
  now += 29999;
  publish(request(2));
  EXPECT_EQ(take_done(), (std::vector<Done>{failed(2, "cannot declare queue dq: " + refused)}));
  EXPECT_TRUE(take_sent().empty());
  PublishRequest other = request(3, "other");
  publish(other);
  EXPECT_EQ(take_sent(), frames({declare(other)}));
  feed(declare_ok("other"));
  take_sent();

  now += 1;
  PublishRequest again = request(4);
  publish(again);
  feed(method(kProxyChannel, amqp::BasicAck{1, false}));  // the copy to "other"
  EXPECT_EQ(take_done(), std::vector<Done>{ok(3)});
  EXPECT_EQ(take_sent(), frames({declare(again)}));
  EXPECT_TRUE(done.empty());
}

}  // namespace
}  // namespace nackguard::session::guard_test
