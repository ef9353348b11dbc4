// The records of unacked deliveries count against limits.retained_body_bytes, content headers
// included, so that a consumer with no prefetch limit cannot grow them without bound. Past the
// budget a delivery is forwarded with no record (or with its tags alone once the tag
// sequences differ), and the client's settlements still reach the broker under the right tags.
// And a hostile broker's body_size near 2^64 cannot wrap the cost of buffering a delivery.

#include <gtest/gtest.h>

#include <limits>

#include "session/script.hpp"

namespace nackguard::session::test {
namespace {

constexpr std::uint64_t kLimit = 1 << 20;

class RecordBudget : public ::testing::Test {
 protected:
  RecordBudget() : budget(kLimit), link(options()) {}
  SessionOptions options() {
    SessionOptions o;
    o.body_budget = &budget;
    return o;
  }
  void SetUp() override {
    handshake(link);
    amqp::BasicConsume consume;
    consume.queue = "q";
    consume.consumer_tag = "c1";
    link.client(method(1, consume));
    link.broker(method(1, amqp::BasicConsumeOk{"c1"}));
    link.client_bytes();
    link.broker_bytes();
  }
  // The broker delivers broker tag `tag`; returns what the client got.
  Bytes deliver_one(std::uint64_t tag, const amqp::BasicProperties& props = {}) {
    link.broker(cat({method(1, deliver_method("c1", tag)), content(1, "payload", props)}));
    return link.client_bytes();
  }
  // Everything the budget still has room for, taken by someone else.
  void fill_budget() {
    filled = kLimit - budget.used();
    budget.force_reserve(filled);
  }
  void unfill_budget() { budget.release(std::exchange(filled, 0)); }
  const ChannelState& ch() { return *link.session.channel(1); }

  retry::BodyBudget budget;
  Link link;
  std::uint64_t filled = 0;
};

amqp::BasicProperties big_headers() {
  amqp::BasicProperties props;
  amqp::FieldTable headers;
  headers.set("trace", amqp::FieldValue::string(std::string(2000, 't')));
  props.headers = headers;
  return props;
}

// Acks in an open transaction keep their records (a rollback gives them back, a channel end
// returns them): they stay charged until the commit, so a consumer that acks and never commits
// cannot grow them past the budget unseen.
TEST_F(RecordBudget, RecordsSettledInAnOpenTransactionStayChargedUntilTheCommit) {
  link.client(raw_method(1, 90, 10));  // tx.select
  link.broker_bytes();
  deliver_one(1, big_headers());
  deliver_one(2, big_headers());
  const std::uint64_t unacked = budget.used();
  EXPECT_GT(unacked, 4000u);
  link.client(ack(1, 2, true));
  EXPECT_EQ(budget.used(), unacked) << "the transaction's acks are no longer counted";
  link.client(raw_method(1, 90, 30));  // tx.rollback: both unacked again
  EXPECT_EQ(budget.used(), unacked);
  link.client(ack(1, 2, true));
  link.client(raw_method(1, 90, 20));  // tx.commit
  EXPECT_EQ(budget.used(), 0u);
}

TEST_F(RecordBudget, AnUnackedDeliverysHeaderIsCountedUntilItIsAcked) {
  deliver_one(1, big_headers());
  ASSERT_EQ(ch().unacked_count(), 1u);
  EXPECT_GT(budget.used(), 2000u);  // the 2000-byte header at least
  EXPECT_EQ(budget.used(), ch().records_bytes());
  link.client(ack(1, 1));
  EXPECT_EQ(budget.used(), 0u);
}

TEST_F(RecordBudget, PastTheBudgetDeliveriesPassUntrackedAndTheirSettlementsPassAsSent) {
  deliver_one(1);
  fill_budget();
  const std::uint64_t refusals = budget.refusals();
  for (std::uint64_t tag = 2; tag <= 4; ++tag) {
    Bytes expected = cat({method(1, deliver_method("c1", tag)), content(1, "payload")});
    EXPECT_EQ(deliver_one(tag), expected) << "tag " << tag;
  }
  EXPECT_EQ(budget.untracked(), 3u);
  EXPECT_EQ(budget.refusals(), refusals + 3);
  EXPECT_EQ(ch().unacked_count(), 1u);  // no record of 2, 3, 4
  EXPECT_EQ(link.observer.deliveries.size(), 1u);
  // Their settlements pass as the client sent them, and the observer hears nothing.
  for (const Bytes& frame : {ack(1, 2), nack(1, 3, false, true)}) {
    link.client(frame);
    EXPECT_EQ(link.broker_bytes(), frame);
  }
  EXPECT_TRUE(link.observer.client_returns.empty());
  // A channel end reports only the recorded delivery.
  link.client(method(1, amqp::ChannelClose{}));
  link.broker(method(1, amqp::ChannelCloseOk{}));
  ASSERT_EQ(link.observer.returned.size(), 1u);
  EXPECT_EQ(link.observer.returned[0].delivery.broker_tag, 1u);
  unfill_budget();
  EXPECT_EQ(budget.used(), 0u);
}

TEST_F(RecordBudget, UntrackedTagsStayMappedAfterTheProxyTakesOverOne) {
  deliver_one(1);
  fill_budget();
  deliver_one(2);
  deliver_one(3);  // client tags 2 and 3, untracked
  unfill_budget();
  link.observer.take_over_at_delivery = {{1, 4}};
  EXPECT_TRUE(deliver_one(4).empty());  // taken over: the sequences differ from now on
  deliver_one(5);                       // client tag 4
  EXPECT_EQ(ch().find_unacked(4)->broker_tag, 5u);
  // A single untracked tag under its own number; a multiple one, as sent, since it takes
  // nothing of the proxy's; client tag 4 as broker tag 5.
  link.client(ack(1, 2));
  EXPECT_EQ(link.to_broker(), frames({ack(1, 2)}));
  link.client(ack(1, 3, true));
  EXPECT_EQ(link.to_broker(), frames({ack(1, 3, true)}));
  EXPECT_EQ(ch().unacked_count(), 1u);
  link.client(ack(1, 4));
  EXPECT_EQ(link.to_broker(), frames({ack(1, 5)}));
}

TEST_F(RecordBudget, PastTheBudgetOnceTagsDifferARunOfTagsMapsTheSettlement) {
  link.observer.take_over_at_delivery = {{1, 1}};
  deliver_one(1);
  const std::uint64_t taken_over_record = ch().records_bytes();
  fill_budget();
  Bytes got = deliver_one(2, big_headers());  // client tag 1
  ASSERT_FALSE(got.empty());
  deliver_one(3);  // client tag 2, the same run
  EXPECT_EQ(budget.untracked(), 2u);
  EXPECT_EQ(ch().unacked_count(), 0u);  // no record: one run, counted, small
  EXPECT_GT(ch().records_bytes(), taken_over_record);
  EXPECT_LT(ch().records_bytes() - taken_over_record, 200u);
  link.client(nack(1, 1, false, true));
  EXPECT_EQ(link.to_broker(), frames({nack(1, 2, false, true)}));
  link.client(ack(1, 2));
  EXPECT_EQ(link.to_broker(), frames({ack(1, 3)}));
  EXPECT_TRUE(link.observer.client_returns.empty());
  unfill_budget();
}

// Each delivery the proxy takes over shifts the tags, so each untracked delivery after one
// starts a run; past kMaxUntrackedRuns of them, an untracked delivery keeps a record of its
// tags alone, and its settlement still maps.
TEST_F(RecordBudget, PastTheMostRunsARecordKeepsTheTagsAlone) {
  std::uint64_t broker_tag = 0;
  for (std::size_t run = 0; run < ChannelState::kMaxUntrackedRuns; ++run) {
    link.observer.take_over_at_delivery.insert({1, ++broker_tag});
    EXPECT_TRUE(deliver_one(broker_tag).empty());
    fill_budget();
    EXPECT_FALSE(deliver_one(++broker_tag).empty());
    unfill_budget();
  }
  EXPECT_EQ(ch().unacked_count(), 0u);
  link.observer.take_over_at_delivery.insert({1, ++broker_tag});
  deliver_one(broker_tag);
  fill_budget();
  deliver_one(++broker_tag, big_headers());
  ASSERT_EQ(ch().unacked_count(), 1u);
  const std::uint64_t client_tag = ChannelState::kMaxUntrackedRuns + 1;
  ASSERT_TRUE(ch().find_unacked(client_tag));
  EXPECT_TRUE(ch().find_unacked(client_tag)->header_payload.empty());  // no header kept
  link.client(ack(1, client_tag));
  EXPECT_EQ(link.to_broker(), frames({ack(1, broker_tag)}));
  // An early one, by its run.
  link.client(ack(1, 1));
  EXPECT_EQ(link.to_broker(), frames({ack(1, 2)}));
  unfill_budget();
}

// A session with `observer`, through its handshake, channel 1 open and consumer "c1" on "q".
class Scripted {
 public:
  Scripted(SessionOptions options, SessionObserver* observer) : session(options, observer) {
    HandshakeFrames f = handshake_frames({}, {});
    feed(Side::client, protocol_header());
    feed(Side::broker, f.start);
    feed(Side::client, f.start_ok);
    feed(Side::broker, f.tune);
    std::vector<WireFrame> tune = decode_frames(out(Side::client));
    EXPECT_FALSE(tune.empty());
    if (!tune.empty()) f = handshake_frames({}, decode_as<amqp::ConnectionTune>(tune.back()));
    feed(Side::client, f.tune_ok);
    feed(Side::client, f.open);
    feed(Side::broker, f.open_ok);
    amqp::BasicConsume consume;
    consume.queue = "q";
    consume.consumer_tag = "c1";
    feed(Side::client, method(1, amqp::ChannelOpen{}));
    feed(Side::broker, method(1, amqp::ChannelOpenOk{}));
    feed(Side::client, method(1, consume));
    feed(Side::broker, method(1, amqp::BasicConsumeOk{"c1"}));
    out(Side::client);
    out(Side::broker);
  }
  void feed(Side from, const Bytes& b) { session.feed(from, b); }
  Bytes out(Side side) {
    Bytes bytes;
    bytes.swap(session.output(side));
    return bytes;
  }
  Session session;
};

// An observer whose plan for each delivery is RecordingObserver's as `adjust` changes it.
class PlanningObserver : public RecordingObserver {
 public:
  using Adjust = void (*)(const Delivery&, DeliveryPlan&);
  explicit PlanningObserver(Adjust adjust) : adjust_(adjust) {}
  DeliveryPlan on_delivery(const Delivery& d) override {
    DeliveryPlan plan = RecordingObserver::on_delivery(d);
    adjust_(d, plan);
    return plan;
  }

 private:
  Adjust adjust_;
};

// A Scripted session whose records count against a budget of kLimit, under a PlanningObserver.
struct Budgeted {
  explicit Budgeted(PlanningObserver::Adjust adjust)
      : observer(adjust), link(SessionOptions{.body_budget = &budget}, &observer) {}
  retry::BodyBudget budget{kLimit};
  PlanningObserver observer;
  Scripted link;
};

TEST(HostileBodySize, ABodySizeThatWouldWrapTheBufferCostIsForwardedNotBuffered) {
  // An observer that wants every body before it decides: the delivery is to be buffered.
  Budgeted b([](const Delivery& d, DeliveryPlan& plan) {
    if (!d.body_complete) plan.action = DeliveryPlan::Action::need_body;
  });
  retry::BodyBudget& budget = b.budget;
  Scripted& link = b.link;
  auto feed = [&](Side from, const Bytes& b) { link.feed(from, b); };
  auto out = [&](Side side) { return link.out(side); };

  const Bytes deliver = method(1, deliver_method("c1", 1));
  // A body_size for which method + header + body + 8 per 4096-byte body frame passes 2^64
  // by about a kilobyte: summed as before, it wrapped to a reservation of a few KB.
  const std::uint64_t header_bytes = header(1, 0).size();
  const unsigned __int128 target = (static_cast<unsigned __int128>(1) << 64) + 1000 -
                                   amqp::kFrameOverhead - deliver.size() - header_bytes;
  std::uint64_t k = static_cast<std::uint64_t>(target / 4104);
  std::uint64_t r = static_cast<std::uint64_t>(target % 4104);
  if (r >= 4096) ++k, r = 0;
  const std::uint64_t body_size = 4096 * k + r;
  const Bytes hdr = header(1, body_size);
  ASSERT_EQ(hdr.size(), header_bytes);
  const unsigned __int128 old_sum = static_cast<unsigned __int128>(deliver.size()) + hdr.size() +
                                    body_size + amqp::kFrameOverhead * (body_size / 4096 + 1);
  ASSERT_LT(static_cast<std::uint64_t>(old_sum), 8192u);  // what the old code reserved

  feed(Side::broker, cat({deliver, hdr}));
  // Not buffered: the method and header reach the client at once, and the body will follow.
  EXPECT_EQ(out(Side::client), cat({deliver, hdr}));
  EXPECT_LT(budget.used(), 8192u);  // the delivery's record, no buffer
  EXPECT_GE(budget.refusals(), 1u);
  feed(Side::broker, body(1, "some"));
  EXPECT_EQ(out(Side::client), body(1, "some"));
  EXPECT_TRUE(link.session.is_open());
}

// Broker tags 2 and 3 wait behind the suspect tag 1; tag 4 has no room in the budget to wait
// and is handed out first, as client tag 2. Tags 2 and 3 then become client tags 3 and 4. A
// multiple ack of client tag 2 must not reach the broker as a multiple ack of broker tag 4,
// which would settle 2 and 3 too: the client has not acked them.
TEST(Reordered, AMultipleAckTakesOnlyWhatTheClientNamedAfterAHeldDeliveryWasPassed) {
  // An observer that hands broker tag 1 out alone (a crash suspect): later deliveries are
  // held back.
  Budgeted b([](const Delivery& d, DeliveryPlan& plan) { plan.suspect = d.broker_tag == 1; });
  retry::BodyBudget& budget = b.budget;
  Scripted& link = b.link;
  auto deliver = [&](std::uint64_t tag, std::string_view body = "payload") {
    link.feed(Side::broker, cat({method(1, deliver_method("c1", tag)), content(1, body)}));
    return decode_frames(link.out(Side::client));
  };
  EXPECT_EQ(deliver(1).size(), 3u);
  EXPECT_TRUE(deliver(2).empty());  // held back
  EXPECT_TRUE(deliver(3).empty());
  // Room for tag 4's record, not for its 8000-byte frames.
  const std::uint64_t room = 2000;
  const std::uint64_t filled = kLimit - budget.used() - room;
  budget.force_reserve(filled);
  std::vector<WireFrame> got = deliver(4, std::string(8000, 'x'));
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(decode_as<amqp::BasicDeliver>(got[0]).delivery_tag, 2u);
  budget.release(filled);

  link.feed(Side::client, ack(1, 1));  // the gate opens: broker tags 2 and 3 follow
  EXPECT_EQ(decode_frames(link.out(Side::broker)), frames({ack(1, 1)}));
  std::vector<WireFrame> released = decode_frames(link.out(Side::client));
  ASSERT_EQ(released.size(), 6u);
  EXPECT_EQ(decode_as<amqp::BasicDeliver>(released[0]).delivery_tag, 3u);
  EXPECT_EQ(decode_as<amqp::BasicDeliver>(released[3]).delivery_tag, 4u);

  link.feed(Side::client, ack(1, 2, true));
  EXPECT_EQ(decode_frames(link.out(Side::broker)), frames({ack(1, 4)}));
  link.feed(Side::client, ack(1, 4, true));  // now all: broker tags 2 and 3
  EXPECT_EQ(decode_frames(link.out(Side::broker)), frames({ack(1, 3, true)}));
}

}  // namespace
}  // namespace nackguard::session::test
