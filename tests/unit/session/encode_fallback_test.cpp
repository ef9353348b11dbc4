// Names over AMQP's 255 bytes and frames that do not encode (issue 12, item 1): every name the
// guard builds is fitted (retry/names.hpp), and a copy that still cannot be encoded is a
// fallback with cause encode_failed. Nothing of it reaches the broker: never a content header
// and body without their basic.publish (505 on the client's whole connection), never a
// queue.declare counted as sent that was not (the next declare-ok matched to the wrong queue).

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "proxy/retry/names.hpp"
#include "proxy/session/proxy_channel.hpp"
#include "session/guard_script.hpp"

namespace nackguard::session::guard_test {
namespace {

class GuardEncode : public GuardTest {
 protected:
  void expect_encode_fallback(const std::string& detail) {
    ASSERT_EQ(listener.fallbacks.size(), 1u);
    EXPECT_EQ(listener.fallbacks[0].cause, "encode_failed");
    EXPECT_EQ(listener.fallbacks[0].detail, detail);
    EXPECT_TRUE(listener.dead_letters.empty());
    EXPECT_EQ(listener.requeues, std::vector<retry::Action>{retry::Action::forward});
  }
};

TEST_F(GuardEncode, ATemplateExpandingPast255BytesDeadLettersToTheFittedDlq) {
  retry::Policy p = policy(0);
  p.dead_letter.routing_key = std::string(260, 'd') + "{queue}.dlq";  // 265 bytes for "q"
  start(p);
  const std::string dlq = retry::fit_name(std::string(260, 'd') + "q.dlq", 4);
  ASSERT_EQ(dlq.size(), 255u);
  deliver_passes(delivery(1, message("m1")));
  client(nack(1));
  EXPECT_EQ(open_proxy_channel(), frames({method(kProxyChannel, passive_declare(dlq))}));
  broker(declare_ok(dlq));
  std::vector<Wire> sent = to_broker();
  Copy copy = take_copy(sent);
  EXPECT_EQ(copy.frames, sent.size());
  EXPECT_EQ(copy.publish.exchange, "");
  EXPECT_EQ(copy.publish.routing_key, dlq);
  confirm(1);
  EXPECT_EQ(to_broker(), frames({ack(1)}));
  EXPECT_TRUE(listener.fallbacks.empty());
  ASSERT_EQ(listener.dead_letters.size(), 1u);
}

TEST_F(GuardEncode, AnExchangeNameThatDoesNotEncodeFallsBackWithNothingHalfSent) {
  retry::Policy p = policy(0);
  p.dead_letter.exchange = std::string(256, 'x');  // the loader refuses it; code may not
  start(p);
  deliver_passes(delivery(1, message("m1")));
  client(nack(1));
  // No header or body frame without its method: only the consumer's own nack.
  EXPECT_EQ(open_proxy_channel(), frames({nack(1, true)}));
  expect_encode_fallback("encode_failed: the basic.publish to exchange \"" +
                         p.dead_letter.exchange +
                         "\" with routing key \"q.dlq\" does not encode (a name over 255 bytes)");
  // The queue's copies are not paused: the next one is tried (and fails the same way).
  deliver_passes(delivery(2, message("m2")));
  client(nack(2));
  EXPECT_EQ(to_broker(), frames({nack(2, true)}));
  EXPECT_EQ(listener.fallbacks.size(), 2u);
  EXPECT_EQ(listener.fallbacks[1].cause, "encode_failed");
}

TEST_F(GuardEncode, ACopysContentHeaderLargerThanFrameMaxFallsBack) {
  start(policy(0));
  // A header frame of frame_max less 40 bytes: the copy's own headers push it past.
  Message m = message("m1");
  m.properties.headers->set("big", amqp::FieldValue::string(""));
  std::size_t base = content_header(kCh, m.body.size(), m.properties).size();
  m.properties.headers->set("big", amqp::FieldValue::string(std::string(131072 - 40 - base, 'b')));
  ASSERT_EQ(content_header(kCh, m.body.size(), m.properties).size(), 131072u - 40u);
  deliver_passes(delivery(1, m));
  client(nack(1));
  EXPECT_EQ(open_proxy_channel(), frames({method(kProxyChannel, passive_declare("q.dlq"))}));
  broker(declare_ok("q.dlq"));
  EXPECT_EQ(to_broker(), frames({nack(1, true)}));
  expect_encode_fallback("encode_failed: the copy's content header is larger than frame_max");
}

// The proxy channel alone, given a declaration no guard builds (a name of 256 bytes).
class ProxyChannelEncode : public ::testing::Test {
 protected:
  ProxyChannelEncode()
      : channel([this](Bytes frames) { sent.insert(sent.end(), frames.begin(), frames.end()); },
                [this](std::uint64_t job, bool ok, const std::string& why) {
                  done.push_back({job, ok, why});
                }) {
    channel.configure(kProxyChannel, 131072);
  }
  struct Done {
    std::uint64_t job;
    bool ok;
    std::string why;
  };

  PublishRequest request(std::uint64_t job, const std::string& queue) {
    PublishRequest r;
    r.job = job;
    r.routing_key = queue;
    r.ensure = QueueSpec{queue, false, {}, -1};
    r.body = retry::RetainedBody::make(nullptr, 4);
    r.body->bytes = bytes_of("copy");
    r.deadline_ms = kT0 + 30000;
    return r;
  }
  void feed(const Bytes& bytes) {
    amqp::FrameDecoder decoder(1u << 20);
    amqp::FrameResult r = decoder.decode(bytes);
    ASSERT_EQ(r.status, amqp::FrameResult::Status::frame);
    channel.on_frame(r.frame, kT0);
  }
  std::vector<Wire> take_sent() {
    std::vector<Wire> out = decode_frames(sent);
    sent.clear();
    return out;
  }

  Bytes sent;
  std::vector<Done> done;
  ProxyChannel channel;
};

TEST_F(ProxyChannelEncode, ADeclareThatDoesNotEncodeIsNotAwaited) {
  const std::string bad(256, 'l');
  channel.publish(request(1, bad), kT0);
  channel.publish(request(2, "good"), kT0);
  EXPECT_EQ(take_sent(), frames({method(kProxyChannel, amqp::ChannelOpen{})}));
  feed(method(kProxyChannel, amqp::ChannelOpenOk{}));
  feed(method(kProxyChannel, amqp::ConfirmSelectOk{}));
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].job, 1u);
  EXPECT_FALSE(done[0].ok);
  EXPECT_TRUE(done[0].why.starts_with(kEncodeFailed)) << done[0].why;
  // The next declaration goes out at once, and its declare-ok is its own.
  EXPECT_EQ(take_sent(), frames({method(kProxyChannel, amqp::ConfirmSelect{}),
                                 method(kProxyChannel, durable_declare("good"))}));
  feed(declare_ok("good"));
  std::vector<Wire> out = take_sent();
  Copy copy = take_copy(out);
  EXPECT_EQ(copy.frames, out.size());
  EXPECT_EQ(copy.publish.routing_key, "good");
  feed(method(kProxyChannel, amqp::BasicAck{1, false}));
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[1].job, 2u);
  EXPECT_TRUE(done[1].ok) << done[1].why;
  EXPECT_EQ(channel.outstanding(), 0u);
}

TEST_F(ProxyChannelEncode, APublishThatDoesNotEncodeSendsNoFrameAtAll) {
  PublishRequest r = request(1, "q");
  r.ensure.reset();
  r.routing_key = std::string(256, 'k');
  channel.publish(std::move(r), kT0);
  take_sent();
  feed(method(kProxyChannel, amqp::ChannelOpenOk{}));
  take_sent();
  feed(method(kProxyChannel, amqp::ConfirmSelectOk{}));
  EXPECT_TRUE(take_sent().empty());
  ASSERT_EQ(done.size(), 1u);
  EXPECT_FALSE(done[0].ok);
  EXPECT_TRUE(done[0].why.starts_with(kEncodeFailed)) << done[0].why;
  EXPECT_EQ(channel.outstanding(), 0u);
}

TEST(DelayQueueName, FitsAndKeepsItsTtl) {
  EXPECT_EQ(delay_queue_name("orders", retry::Millis(1000)), "nackguard.delay.orders.1000ms");
  for (std::size_t n = 230; n <= 255; ++n) {
    std::string queue(n, 'q');
    std::string name = delay_queue_name(queue, retry::Millis(512000));
    std::string full = "nackguard.delay." + queue + ".512000ms";
    EXPECT_LE(name.size(), 255u);
    EXPECT_EQ(name, retry::fit_name(full, 9));
    EXPECT_TRUE(name.ends_with(".512000ms"));
  }
  EXPECT_NE(delay_queue_name(std::string(250, 'q'), retry::Millis(1000)),
            delay_queue_name(std::string(250, 'q'), retry::Millis(2000)));
}

}  // namespace
}  // namespace nackguard::session::guard_test
