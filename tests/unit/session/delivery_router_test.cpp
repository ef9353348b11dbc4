// The delivery router alone, without a Session: what reaches the client's outbox, what the
// channel records, and that the observer's TakeOver of a delivery is kept for the session
// to apply rather than applied (the takeover tests check the same through a Session).

#include <gtest/gtest.h>
#include <xxhash.h>

#include "proxy/session/delivery_router.hpp"
#include "session/script.hpp"

namespace nackguard::session::test {
namespace {

class DeliveryRouterTest : public ::testing::Test {
 protected:
  DeliveryRouterTest() { outbox.set_source(broker_input); }

  // Feeds one delivery's frames (deliver, header, body frames of at most `body_frame` bytes)
  // as the session would: the last frame's bookkeeping is done before the next frame.
  void deliver_one(std::uint64_t broker_tag, std::string_view body_text,
                   std::size_t body_frame = 131064) {
    if (router.has_deferred()) router.settle_deferred();  // before the frames it points to go
    wire =
        cat({method(1, deliver_method("ctag", broker_tag)), content(1, body_text, {}, body_frame)});
    amqp::FrameDecoder decoder(1u << 20);
    ByteView rest(wire);
    int index = 0;
    while (!rest.empty()) {
      amqp::FrameResult r = decoder.decode(rest);
      ASSERT_EQ(r.status, amqp::FrameResult::Status::frame);
      if (router.has_deferred()) router.settle_deferred();
      if (index == 0) {
        Delivery d;
        d.broker_tag = broker_tag;
        d.consumer_tag = "ctag";
        router.begin(ch, r.frame, std::move(d));
      } else if (index == 1) {
        ch.from_broker.phase = ContentState::Phase::awaiting_body;
        ch.from_broker.remaining = body_text.size();
        router.header(ch, r.frame);
      } else {
        ch.from_broker.remaining -= r.frame.payload.size();
        router.body(ch, r.frame);
      }
      rest = rest.subspan(r.frame.raw.size());
      ++index;
    }
    ch.from_broker.phase = ContentState::Phase::idle;
    router.complete(ch);
  }
  std::vector<WireFrame> to_client() {
    std::vector<WireFrame> frames = decode_frames(outbox.bytes());
    outbox.bytes().clear();
    return frames;
  }

  Bytes wire;  // the frames last fed, as read: a deferred hash reads them
  InputBuffer broker_input;
  Outbox outbox;
  RecordingObserver observer;
  std::int64_t clock_ms = 5000;
  DeliveryRouter router{observer, nullptr, outbox, clock_ms};
  ChannelState ch;
};

TEST_F(DeliveryRouterTest, AForwardedDeliveryReachesTheClientUnchangedAndIsRecorded) {
  deliver_one(1, "first");
  EXPECT_EQ(to_client(), frames({deliver(1, "ctag", 1, "first")}));
  // Its record waits until its frames are sent (the session's next call).
  EXPECT_EQ(ch.find_unacked(1), nullptr);
  ASSERT_TRUE(router.has_deferred());
  router.settle_deferred();
  EXPECT_FALSE(router.has_deferred());
  const Delivery* d = ch.find_unacked(1);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->broker_tag, 1u);
  EXPECT_EQ(d->handed_out_ms, 5000);
  EXPECT_EQ(static_cast<std::uint64_t>(d->body_hash), XXH3_64bits("first", 5));
  EXPECT_EQ(observer.take_events(), (std::vector<std::string>{"delivery ch1 b1"}));
  EXPECT_FALSE(router.has_take_overs());
}

// A copy of nackguard's is a retry the broker delivers as new: the client sees it redelivered,
// and the rest of the frame as it came (tag renumbered or not).
TEST_F(DeliveryRouterTest, ARetryIsShownRedeliveredAndNothingElseChanges) {
  observer.show_redelivered = {{1, 1}, {1, 3}};
  deliver_one(1, "copy");
  amqp::BasicDeliver expected = deliver_method("ctag", 1);
  expected.redelivered = true;
  EXPECT_EQ(to_client(), frames({method(1, expected), content(1, "copy", {}, 131064)}));
  router.settle_deferred();
  EXPECT_TRUE(ch.find_unacked(1)->show_redelivered);
  EXPECT_FALSE(ch.find_unacked(1)->redelivered);  // the broker's flag, as the guard reads it
  deliver_one(2, "plain");
  EXPECT_EQ(to_client(), frames({deliver(1, "ctag", 2, "plain")}));
  router.settle_deferred();
  // A tag renumbered too (the client's 3 is the broker's 4): both fields patched.
  ch.note_owned();
  (void)ch.next_client_tag();  // the client's 3 went to a delivery the proxy took
  deliver_one(3, "copy again");
  std::vector<WireFrame> got = to_client();
  ASSERT_FALSE(got.empty());
  const amqp::BasicDeliver shown = decode_as<amqp::BasicDeliver>(got[0]);
  EXPECT_TRUE(shown.redelivered);
  EXPECT_EQ(shown.delivery_tag, 4u);
  EXPECT_EQ(shown.consumer_tag, "ctag");
}

TEST_F(DeliveryRouterTest, ABodyInSeveralFramesIsHashedWholeOnceSettled) {
  std::string body(10000, 'q');
  for (std::size_t i = 0; i < body.size(); ++i) body[i] = static_cast<char>('a' + i % 26);
  deliver_one(1, body, 4000);  // three body frames, the last one's hash put off
  router.settle_deferred();
  const Delivery* d = ch.find_unacked(1);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(static_cast<std::uint64_t>(d->body_hash), XXH3_64bits(body.data(), body.size()));
  // The next delivery on the channel starts from a fresh hash.
  deliver_one(2, "second");
  router.settle_deferred();
  ASSERT_NE(ch.find_unacked(2), nullptr);
  EXPECT_EQ(static_cast<std::uint64_t>(ch.find_unacked(2)->body_hash), XXH3_64bits("second", 6));
}

TEST_F(DeliveryRouterTest, AnEmptyBodyIsRecordedWithTheHashOfNothing) {
  deliver_one(1, "");
  router.settle_deferred();
  ASSERT_NE(ch.find_unacked(1), nullptr);
  EXPECT_EQ(static_cast<std::uint64_t>(ch.find_unacked(1)->body_hash), XXH3_64bits("", 0));
}

TEST_F(DeliveryRouterTest, ATakeoverKeepsTheObserversTakeOverForTheSession) {
  observer.take_over_at_delivery.insert({1, 1});
  deliver_one(1, "poison");
  EXPECT_TRUE(to_client().empty());
  EXPECT_EQ(ch.taken_over_count(), 1u);
  EXPECT_EQ(observer.take_events(),
            (std::vector<std::string>{"delivery ch1 b1", "taken-over ch1 b1 poison"}));
  ASSERT_TRUE(router.has_take_overs());
  std::vector<DeliveryRouter::TakenOver> taken = router.take_take_overs();
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0].channel, 1);
  EXPECT_EQ(taken[0].broker_tag, 1u);
  ASSERT_TRUE(taken[0].take_over.has_value());
  EXPECT_EQ(taken[0].take_over->ticket().job, observer.jobs);
  EXPECT_FALSE(router.has_take_overs());

  // The client's tags go on without the gap: broker tag 2 is client tag 1.
  deliver_one(2, "next");
  router.settle_deferred();
  Bytes renumbered = cat({method(1, deliver_method("ctag", 1)), content(1, "next")});
  EXPECT_EQ(to_client(), frames({renumbered}));
  ASSERT_NE(ch.find_unacked(1), nullptr);
  EXPECT_EQ(ch.find_unacked(1)->broker_tag, 2u);
}

TEST_F(DeliveryRouterTest, ADeliveryBehindASuspectOneWaitsUntilItIsSettled) {
  deliver_one(1, "suspect");
  to_client();
  ch.gate.close(1);  // what a suspect plan leaves behind
  deliver_one(2, "waits");
  EXPECT_TRUE(to_client().empty());
  EXPECT_TRUE(router.any_held_back());
  ASSERT_EQ(ch.held_back.size(), 1u);
  EXPECT_FALSE(router.release_next(ch));  // still blocked
  // Held back, the observer has not been asked yet.
  EXPECT_EQ(observer.take_events(), (std::vector<std::string>{"delivery ch1 b1"}));

  ch.gate.open();
  EXPECT_TRUE(router.release_next(ch));
  EXPECT_FALSE(router.release_next(ch));
  EXPECT_FALSE(router.any_held_back());
  EXPECT_EQ(to_client(), frames({deliver(1, "ctag", 2, "waits")}));
  EXPECT_EQ(observer.take_events(), (std::vector<std::string>{"delivery ch1 b2"}));
  EXPECT_NE(ch.find_unacked(2), nullptr);
}

TEST_F(DeliveryRouterTest, AnEndingChannelTakesItsHeldBackDeliveriesOutOfTheCount) {
  deliver_one(1, "suspect");
  ch.gate.close(1);
  deliver_one(2, "waits");
  ASSERT_TRUE(router.any_held_back());
  std::deque<ChannelState::HeldBackDelivery> held = router.take_held_back(ch);
  ASSERT_EQ(held.size(), 1u);
  EXPECT_EQ(held.front().delivery.broker_tag, 2u);
  EXPECT_FALSE(router.any_held_back());
  EXPECT_TRUE(ch.held_back.empty());
}

}  // namespace
}  // namespace nackguard::session::test
