// The proxy's own channel, alone: frames out through `send`, broker frames in through
// on_frame, and exactly one `done` per publish.

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "proxy/session/proxy_channel.hpp"
#include "session/guard_script.hpp"

namespace nackguard::session::guard_test {
namespace {

struct Done {
  std::uint64_t job = 0;
  bool ok = false;
  std::string why;
  bool operator==(const Done&) const = default;
};

void PrintTo(const Done& d, std::ostream* os) {
  *os << "{job " << d.job << (d.ok ? ", ok" : ", failed") << (d.why.empty() ? "" : ": ") << d.why
      << "}";
}

class ProxyChannelTest : public ::testing::Test {
 protected:
  ProxyChannelTest()
      : channel([this](Bytes frames) { sent.insert(sent.end(), frames.begin(), frames.end()); },
                [this](std::uint64_t job, bool ok, const std::string& why) {
                  done.push_back({job, ok, why});
                },
                [this](const std::string& queue, const std::string& why) {
                  notices.emplace_back(queue, why);
                }) {
    channel.configure(kProxyChannel, 131072);
  }

  // A request for `job`, its body `body`, to the default exchange and queue `queue`, which
  // the channel is to declare itself (arguments: one TTL).
  PublishRequest request(std::uint64_t job, const std::string& queue = "dq",
                         std::string_view body = "copy") {
    PublishRequest r;
    r.job = job;
    r.exchange = "";
    r.routing_key = queue;
    QueueSpec spec;
    spec.name = queue;
    spec.arguments.set("x-message-ttl", amqp::FieldValue::i64(1000));
    r.ensure = std::move(spec);
    r.header.properties.message_id = "m" + std::to_string(job);
    r.body = retry::RetainedBody::make(nullptr, body.size());
    ByteView view = amqp::as_bytes(body);
    r.body->bytes.assign(view.begin(), view.end());
    r.deadline_ms = now + 30000;
    return r;
  }
  // A request to exchange "x" with routing key `key`, nothing to declare.
  PublishRequest to_exchange(std::uint64_t job, const std::string& key) {
    PublishRequest r = request(job);
    r.ensure.reset();
    r.exchange = "x";
    r.routing_key = key;
    return r;
  }

  void publish(PublishRequest r) { channel.publish(std::move(r), now); }
  // Every frame of `bytes` through on_frame, at the current time.
  void feed(const Bytes& bytes) {
    amqp::FrameDecoder decoder(1u << 30);
    ByteView rest(bytes);
    while (!rest.empty()) {
      amqp::FrameResult r = decoder.decode(rest);
      ASSERT_EQ(r.status, amqp::FrameResult::Status::frame);
      channel.on_frame(r.frame, now);
      rest = rest.subspan(r.frame.raw.size());
    }
  }
  std::vector<Wire> take_sent() {
    std::vector<Wire> out = decode_frames(sent);
    sent.clear();
    return out;
  }
  std::vector<Done> take_done() {
    std::vector<Done> out;
    out.swap(done);
    return out;
  }
  // Answers channel.open and confirm.select, checking that both were asked for.
  void open() {
    EXPECT_EQ(take_sent(), frames({method(kProxyChannel, amqp::ChannelOpen{})}));
    feed(method(kProxyChannel, amqp::ChannelOpenOk{}));
    EXPECT_EQ(take_sent(), frames({method(kProxyChannel, amqp::ConfirmSelect{})}));
    feed(method(kProxyChannel, amqp::ConfirmSelectOk{}));
  }
  // The frames of publishing `r` as publish-sequence-independent bytes.
  static Bytes publish_frames(const PublishRequest& r, std::uint32_t frame_max = 131072) {
    amqp::BasicPublish p;
    p.exchange = r.exchange;
    p.routing_key = r.routing_key;
    p.mandatory = true;
    amqp::ContentHeader h = r.header;
    h.body_size = r.body->bytes.size();
    Bytes out = method(kProxyChannel, p);
    EXPECT_TRUE(amqp::append_content_header_frame(out, kProxyChannel, h));
    const std::size_t chunk = frame_max - amqp::kFrameOverhead;
    const Bytes& body = r.body->bytes;
    for (std::size_t at = 0; at < body.size(); at += chunk) {
      amqp::append_frame(out, FrameType::body, kProxyChannel,
                         ByteView(body).subspan(at, std::min(chunk, body.size() - at)));
    }
    return out;
  }
  static Bytes declare(const PublishRequest& r) {
    return method(kProxyChannel, durable_declare(r.ensure->name, r.ensure->arguments));
  }

  std::int64_t now = kT0;
  Bytes sent;
  std::vector<Done> done;
  std::vector<std::pair<std::string, std::string>> notices;
  ProxyChannel channel;
};

Done ok(std::uint64_t job) {
  return {job, true, ""};
}

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
  PublishRequest r = request(1, "q.dlq");
  r.ensure->use_existing = true;
  r.ensure->arguments = {};
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
  EXPECT_EQ(take_done(), (std::vector<Done>{{1, false, why}, {2, false, why}}));
  feed(method(kProxyChannel, amqp::BasicAck{3, false}));
  EXPECT_EQ(take_done(), std::vector<Done>{ok(3)});
}

TEST_F(ProxyChannelTest, ReturnBeforeTheAckFailsThatJobAsUnroutable) {
  publish(to_exchange(1, "nowhere"));
  publish(to_exchange(2, "bound"));
  open();
  EXPECT_EQ(take_sent().size(), 2u * 3u);
  amqp::BasicReturn returned;
  returned.reply_code = 312;
  returned.reply_text = "NO_ROUTE";
  returned.exchange = "x";
  returned.routing_key = "nowhere";
  amqp::BasicProperties props;
  props.message_id = "m1";
  // The returned content, its body in two frames, then one ack for both publishes.
  feed(cat({method(kProxyChannel, returned), content_header(kProxyChannel, 4, props),
            body_frame(kProxyChannel, "co"), body_frame(kProxyChannel, "py"),
            method(kProxyChannel, amqp::BasicAck{2, true})}));
  EXPECT_EQ(
      take_done(),
      (std::vector<Done>{
          {1, false, "the copy was unroutable: exchange \"x\" has no binding for \"nowhere\""},
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
  amqp::BasicReturn returned;
  returned.reply_code = 312;
  returned.reply_text = "NO_ROUTE";
  returned.exchange = "x";
  returned.routing_key = "k";
  amqp::BasicProperties props;
  const Bytes returned_content =
      cat({method(kProxyChannel, returned), content_header(kProxyChannel, 4, props),
           body_frame(kProxyChannel, "copy")});
  const std::string unroutable = "the copy was unroutable: exchange \"x\" has no binding for \"k\"";
  feed(cat({returned_content, method(kProxyChannel, amqp::BasicAck{1, false}),
            method(kProxyChannel, amqp::BasicAck{2, false})}));
  EXPECT_EQ(take_done(), (std::vector<Done>{{1, false, unroutable}, ok(2)}));
  // The third is returned too, then acked: that return is its own.
  feed(cat({returned_content, method(kProxyChannel, amqp::BasicAck{3, false})}));
  EXPECT_EQ(take_done(), (std::vector<Done>{{3, false, unroutable}}));
}

// A queue the channel declared (or found) once is taken to exist for the channel's life. If
// it is deleted (by an operator, or by its own x-expires), copies to it by the default
// exchange come back unroutable; the next copy should check the queue again rather than be
// published into the void again, or a long-lived connection never dead-letters again.
TEST_F(ProxyChannelTest, UnroutableCopyToAnEnsuredQueueDeclaresItAgain) {
  PublishRequest r = request(1, "q.dlq");
  r.ensure->use_existing = true;
  r.ensure->arguments = {};
  publish(r);
  open();
  EXPECT_EQ(take_sent(), frames({method(kProxyChannel, passive_declare("q.dlq"))}));
  feed(declare_ok("q.dlq"));
  EXPECT_EQ(take_sent(), frames({publish_frames(r)}));

  amqp::BasicReturn returned;
  returned.reply_code = 312;
  returned.reply_text = "NO_ROUTE";
  returned.exchange = "";
  returned.routing_key = "q.dlq";
  feed(cat({method(kProxyChannel, returned), content_header(kProxyChannel, 4, r.header.properties),
            body_frame(kProxyChannel, "copy"), method(kProxyChannel, amqp::BasicAck{1, false})}));
  ASSERT_EQ(done.size(), 1u);
  EXPECT_FALSE(take_done()[0].ok);

  PublishRequest next = request(2, "q.dlq");
  next.ensure->use_existing = true;
  next.ensure->arguments = {};
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
  EXPECT_EQ(take_done(), (std::vector<Done>{{1, false, why}, {2, false, why}}));
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
  EXPECT_EQ(take_done(), (std::vector<Done>{{1, false, "cannot declare queue dq: " + refused}}));

  // Another job for it within 30 s fails at once, without a frame; others go on.
  now += 29999;
  publish(request(2));
  EXPECT_EQ(take_done(), (std::vector<Done>{{2, false, "cannot declare queue dq: " + refused}}));
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

TEST_F(ProxyChannelTest, LargeBodyIsSplitByFrameMax) {
  channel.configure(kProxyChannel, 4096);
  std::string body(10000, '\0');
  for (std::size_t i = 0; i < body.size(); ++i) body[i] = static_cast<char>(i * 7);
  PublishRequest r = to_exchange(1, "big");
  r.body = retry::RetainedBody::make(nullptr, body.size());
  ByteView view = amqp::as_bytes(body);
  r.body->bytes.assign(view.begin(), view.end());
  publish(r);
  open();
  Bytes raw = sent;
  std::vector<Wire> got = take_sent();
  ASSERT_EQ(got.size(), 2u + 3u);
  // 4096-byte frames carry 4088 bytes of body: 4088 + 4088 + 1824.
  EXPECT_EQ(got[2].payload.size(), 4088u);
  EXPECT_EQ(got[3].payload.size(), 4088u);
  EXPECT_EQ(got[4].payload.size(), 1824u);
  Copy copy = take_copy(got);
  EXPECT_EQ(copy.header.body_size, 10000u);
  EXPECT_EQ(copy.body, bytes_of(body));
  EXPECT_EQ(raw, publish_frames(r, 4096));
}

TEST_F(ProxyChannelTest, FrameMaxBelowTheMinimumIsRaisedToIt) {
  channel.configure(kProxyChannel, 512);
  PublishRequest r = to_exchange(1, "big");
  std::string body(5000, 'b');
  r.body = retry::RetainedBody::make(nullptr, body.size());
  ByteView view = amqp::as_bytes(body);
  r.body->bytes.assign(view.begin(), view.end());
  publish(r);
  open();
  std::vector<Wire> got = take_sent();
  ASSERT_EQ(got.size(), 2u + 2u);
  EXPECT_EQ(got[2].payload.size(), 4088u);
}

TEST_F(ProxyChannelTest, FailAllFailsWaitingAndInFlightJobsAndCloses) {
  publish(to_exchange(1, "a"));
  open();
  take_sent();
  publish(request(2));  // waits for its declaration
  take_sent();
  channel.fail_all("the connection closed");
  EXPECT_EQ(take_done(), (std::vector<Done>{{2, false, "the connection closed"},
                                            {1, false, "the connection closed"}}));
  EXPECT_EQ(channel.outstanding(), 0u);
  EXPECT_TRUE(take_sent().empty());
  // A late confirm means nothing; a new job opens the channel again.
  feed(method(kProxyChannel, amqp::BasicAck{1, false}));
  EXPECT_TRUE(done.empty());
  publish(to_exchange(3, "a"));
  EXPECT_EQ(take_sent(), frames({method(kProxyChannel, amqp::ChannelOpen{})}));
}

TEST_F(ProxyChannelTest, WithoutAChannelEveryPublishFailsAtOnce) {
  channel.configure(std::nullopt, 131072);
  publish(request(1));
  EXPECT_EQ(take_done(),
            (std::vector<Done>{
                {1, false, "no channel left for the proxy (the broker's channel_max is 1)"}}));
  EXPECT_TRUE(take_sent().empty());
  EXPECT_EQ(channel.outstanding(), 0u);
}

TEST_F(ProxyChannelTest, TickFailsJobsPastTheirDeadlineOnly) {
  publish(to_exchange(1, "a"));
  open();
  take_sent();
  now += 1000;
  publish(to_exchange(2, "a"));  // deadline kT0 + 31000
  take_sent();
  channel.on_tick(kT0 + 29999);
  EXPECT_TRUE(done.empty());
  channel.on_tick(kT0 + 30000);
  EXPECT_EQ(take_done(), (std::vector<Done>{{1, false, "no publisher confirm in time"}}));
  feed(method(kProxyChannel, amqp::BasicAck{2, true}));  // covers 1 too: only 2 is left
  EXPECT_EQ(take_done(), std::vector<Done>{ok(2)});
}

TEST_F(ProxyChannelTest, TickFailsAJobStillWaitingForItsChannel) {
  publish(request(1));
  take_sent();
  channel.on_tick(kT0 + 30000);
  EXPECT_EQ(take_done(),
            (std::vector<Done>{
                {1, false, "the proxy's channel or queue declaration did not complete in time"}}));
}

}  // namespace
}  // namespace nackguard::session::guard_test
