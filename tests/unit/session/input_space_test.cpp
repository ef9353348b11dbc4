// Reading straight into the session's input buffer (input_space / commit_input), as the relay
// does: frames larger than a read are completed in place, and whatever the cut, the bytes come
// out as they went in.

#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>
#include <random>

#include "session/script.hpp"

namespace nackguard::session::test {
namespace {

// Delivers `data` to `side` through input_space/commit_input, in reads of at most `max_read`.
void read_in(Link& link, Side side, ByteView data, std::size_t max_read, std::mt19937& rng) {
  std::size_t at = 0;
  while (at < data.size()) {
    std::span<std::uint8_t> space = link.session.input_space(side, 4096);
    ASSERT_FALSE(space.empty());
    std::size_t n = std::min({space.size(), data.size() - at, 1 + rng() % max_read});
    std::memcpy(space.data(), data.data() + at, n);
    link.session.commit_input(side, n);
    at += n;
  }
}

TEST(SessionInputSpace, LargeBodyFramesPassByteIdenticalWhateverTheReads) {
  std::string big(100000, 'x');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>('a' + i % 26);
  Bytes from_broker = cat({
      method(1, amqp::ChannelOpenOk{}),
      method(1, amqp::BasicConsumeOk{"c1"}),
      method(1, deliver_method("c1", 1)),
      content(1, big, {}, 131064),  // one body frame near frame_max
      method(1, deliver_method("c1", 2)),
      content(1, big, {}, 30000),
      heartbeat(),
  });
  std::mt19937 rng(7);
  for (std::size_t max_read : {1u, 700u, 4096u, 65536u, 200000u}) {
    SCOPED_TRACE("max_read " + std::to_string(max_read));
    Link link;
    handshake(link);
    read_in(link, Side::broker, from_broker, max_read, rng);
    EXPECT_EQ(link.client_bytes(), from_broker);
    EXPECT_EQ(link.observer.deliveries.size(), 2u);
  }
}

TEST(SessionInputSpace, RoomForTheRestOfAFrameWhoseHeaderIsIn) {
  Link link;
  handshake(link);
  Bytes frame = content(1, std::string(120000, 'b'), {}, 131064);
  // The content header frame, then the first 10 bytes of the body frame.
  Bytes deliver_frame = method(1, deliver_method("c1", 1));
  link.broker(deliver_frame);
  std::vector<WireFrame> parts = decode_frames(frame);
  ASSERT_EQ(parts.size(), 2u);
  Bytes header_frame =
      Bytes(frame.begin(), frame.end() - static_cast<std::ptrdiff_t>(parts[1].payload.size() + 8));
  link.broker(header_frame);
  Bytes body_frame(frame.begin() + static_cast<std::ptrdiff_t>(header_frame.size()), frame.end());
  link.broker(ByteView(body_frame).first(10));
  std::span<std::uint8_t> space = link.session.input_space(Side::broker, 1024);
  EXPECT_GE(space.size(), body_frame.size() - 10);
  std::memcpy(space.data(), body_frame.data() + 10, body_frame.size() - 10);
  link.session.commit_input(Side::broker, body_frame.size() - 10);
  EXPECT_EQ(link.client_bytes(), cat({deliver_frame, frame}));
}

TEST(SessionInputSpace, NoRoomIsMadeForAFrameAboveFrameMax) {
  Link link;
  handshake(link);
  // A header announcing 2^31 bytes: the decoder refuses it; the buffer must not grow for it.
  Bytes hostile = {1, 0, 1, 0x80, 0, 0, 0};
  link.broker(hostile);
  EXPECT_TRUE(link.session.close_after_flush(Side::broker));
  std::span<std::uint8_t> space = link.session.input_space(Side::broker, 1024);
  EXPECT_LT(space.size(), 1u << 20);
}

// Frames forwarded as they were read stay in the input buffer (forwarded()), uncopied, until
// the relay writes them or the buffer is about to be reused.
class ForwardedRun : public ::testing::Test {
 protected:
  void SetUp() override {
    handshake(link);
    frames = cat({method(1, amqp::ChannelOpenOk{}), method(1, amqp::BasicConsumeOk{"c1"}),
                  method(1, deliver_method("c1", 1)), content(1, "payload", {})});
    space = link.session.input_space(Side::broker, 4096);
    std::memcpy(space.data(), frames.data(), frames.size());
    link.session.commit_input(Side::broker, frames.size());
  }
  // The next read: it overwrites the whole buffer.
  void read_garbage() {
    std::span<std::uint8_t> next = link.session.input_space(Side::broker, 4096);
    std::memset(next.data(), 0xEE, next.size());
  }
  Link link;
  Bytes frames;
  std::span<std::uint8_t> space;
};

TEST_F(ForwardedRun, IsTheInputBufferItself) {
  ByteView run = link.session.forwarded(Side::client);
  EXPECT_EQ(run.data(), space.data());
  EXPECT_EQ(Bytes(run.begin(), run.end()), frames);
  EXPECT_TRUE(link.session.output(Side::client).size() == frames.size());
  EXPECT_TRUE(link.session.forwarded(Side::client).empty());  // output() copied it
}

TEST_F(ForwardedRun, IsCopiedBeforeTheNextReadOverwritesIt) {
  read_garbage();
  EXPECT_TRUE(link.session.forwarded(Side::client).empty());
  EXPECT_EQ(link.client_bytes(), frames);
}

TEST_F(ForwardedRun, WhatTheRelayDidNotWriteMovesToTheOutput) {
  link.session.forwarded_written(Side::client, 10);
  EXPECT_TRUE(link.session.forwarded(Side::client).empty());
  read_garbage();
  EXPECT_EQ(link.client_bytes(), Bytes(frames.begin() + 10, frames.end()));
}

TEST_F(ForwardedRun, ComesBeforeWhatIsQueuedAfterIt) {
  link.session.inject(Side::client, heartbeat());
  read_garbage();
  EXPECT_EQ(link.client_bytes(), cat({frames, heartbeat()}));
}

// The last frame's bookkeeping (the delivery's body hash and record) waits until the relay
// has sent it; whatever the session does next does it first.
TEST_F(ForwardedRun, RecordsTheDeliveryOnceTheRelayIsDone) {
  const ChannelState* ch = link.session.channel(1);
  ASSERT_NE(ch, nullptr);
  EXPECT_EQ(ch->find_unacked(1), nullptr);
  link.session.finish_bookkeeping();
  ASSERT_NE(ch->find_unacked(1), nullptr);
  EXPECT_EQ(static_cast<std::uint64_t>(ch->find_unacked(1)->body_hash), XXH3_64bits("payload", 7));
}

TEST_F(ForwardedRun, HashesTheBodyBeforeTheNextReadOverwritesIt) {
  read_garbage();
  const Delivery* d = link.session.channel(1)->find_unacked(1);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(static_cast<std::uint64_t>(d->body_hash), XXH3_64bits("payload", 7));
}

TEST_F(ForwardedRun, AClientReturnHandledNextFindsTheDelivery) {
  link.observer.take_events();
  link.client(nack(1, 1, false, true));
  EXPECT_EQ(link.observer.take_events(),
            (std::vector<std::string>{"client-return ch1 b1 c1 nack"}));
}

TEST_F(ForwardedRun, AConnectionLostNextReturnsTheDelivery) {
  link.observer.take_events();
  link.session.on_eof(Side::client);
  EXPECT_EQ(link.observer.take_events(),
            (std::vector<std::string>{"returned ch1 b1 connection_closed"}));
}

TEST(BodyHash, DeferredToARetainedBodyEqualsTheStreamedHash) {
  auto body = retry::RetainedBody::make(nullptr, 5);
  body->bytes = {'h', 'e', 'l', 'l', 'o'};
  BodyHash hash;
  hash.defer_to(body);
  EXPECT_EQ(static_cast<std::uint64_t>(hash), XXH3_64bits("hello", 5));
  BodyHasher streamed;
  streamed.update(amqp::as_bytes("he"));
  streamed.update(amqp::as_bytes("llo"));
  EXPECT_EQ(static_cast<std::uint64_t>(hash), streamed.digest());
  hash = 42;
  EXPECT_EQ(static_cast<std::uint64_t>(hash), 42u);
}

}  // namespace
}  // namespace nackguard::session::test
