// The proxy's own channel, alone: frames out through `send`, broker frames in through
// on_frame, and exactly one `done` per publish. Frame sizes, deadlines, the
// connection's end and frames that do not encode.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "session/proxy_channel_fixture.hpp"

namespace nackguard::session::guard_test {
namespace {

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
  fail_all("the connection closed");
  EXPECT_EQ(take_done(), (std::vector<Done>{failed(2, "the connection closed"),
                                            failed(1, "the connection closed")}));
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
  EXPECT_EQ(
      take_done(),
      (std::vector<Done>{failed(1, "no channel left for the proxy (the broker's channel_max is 1)",
                                retry::FallbackCause::no_channel)}));
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
  tick(kT0 + 29999);
  EXPECT_TRUE(done.empty());
  tick(kT0 + 30000);
  EXPECT_EQ(take_done(), (std::vector<Done>{failed(1, "no publisher confirm in time")}));
  feed(method(kProxyChannel, amqp::BasicAck{2, true}));  // covers 1 too: only 2 is left
  EXPECT_EQ(take_done(), std::vector<Done>{ok(2)});
}

TEST_F(ProxyChannelTest, TickFailsAJobStillWaitingForItsChannel) {
  publish(request(1));
  take_sent();
  tick(kT0 + 30000);
  EXPECT_EQ(take_done(),
            (std::vector<Done>{
                failed(1, "the proxy's channel or queue declaration did not complete in time")}));
}

TEST_F(ProxyChannelTest, ADeclareThatDoesNotEncodeIsNotAwaited) {
  const std::string bad(256, 'l');
  publish(request(1, bad));
  PublishRequest good = request(2, "good");
  const Bytes good_declare = declare(good);
  publish(std::move(good));
  EXPECT_EQ(take_sent(), frames({method(kProxyChannel, amqp::ChannelOpen{})}));
  feed(method(kProxyChannel, amqp::ChannelOpenOk{}));
  feed(method(kProxyChannel, amqp::ConfirmSelectOk{}));
  EXPECT_EQ(
      take_done(),
      (std::vector<Done>{failed(1,
                                "the queue.declare of \"" + bad +
                                    "\" does not encode (a name over 255 bytes, or its arguments)",
                                retry::FallbackCause::encode_failed)}));
  // The next declaration goes out at once, and its declare-ok is its own.
  EXPECT_EQ(take_sent(), frames({method(kProxyChannel, amqp::ConfirmSelect{}), good_declare}));
  feed(declare_ok("good"));
  std::vector<Wire> out = take_sent();
  Copy copy = take_copy(out);
  EXPECT_EQ(copy.frames, out.size());
  EXPECT_EQ(copy.publish.routing_key, "good");
  feed(method(kProxyChannel, amqp::BasicAck{1, false}));
  EXPECT_EQ(take_done(), std::vector<Done>{ok(2)});
  EXPECT_EQ(channel.outstanding(), 0u);
}

TEST_F(ProxyChannelTest, APublishThatDoesNotEncodeSendsNoFrameAtAll) {
  const std::string key(256, 'k');
  publish(to_exchange(1, key));
  open();
  EXPECT_TRUE(take_sent().empty());
  EXPECT_EQ(take_done(), (std::vector<Done>{failed(1,
                                                   "the basic.publish to exchange \"x\" with "
                                                   "routing key \"" +
                                                       key +
                                                       "\" does not encode (a name over 255 "
                                                       "bytes)",
                                                   retry::FallbackCause::encode_failed)}));
  EXPECT_EQ(channel.outstanding(), 0u);
}

}  // namespace
}  // namespace nackguard::session::guard_test
