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

  BodyBudget budget;
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

TEST_F(RecordBudget, UntrackedTagsStayMappedAfterTheProxyWithholdsOne) {
  deliver_one(1);
  fill_budget();
  deliver_one(2);
  deliver_one(3);  // client tags 2 and 3, untracked
  unfill_budget();
  link.observer.withhold = {{1, 4}};
  EXPECT_TRUE(deliver_one(4).empty());  // withheld: the sequences differ from now on
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

TEST_F(RecordBudget, PastTheBudgetOnceTagsDifferARecordKeepsTheTagsAlone) {
  link.observer.withhold = {{1, 1}};
  deliver_one(1);
  const std::uint64_t withheld_record = ch().records_bytes();
  fill_budget();
  Bytes got = deliver_one(2, big_headers());  // client tag 1
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(budget.untracked(), 1u);
  ASSERT_EQ(ch().unacked_count(), 1u);
  EXPECT_TRUE(ch().find_unacked(1)->header_payload.empty());  // no header kept
  // Its record is counted, and small: not its 2000-byte header.
  EXPECT_GT(ch().records_bytes(), withheld_record);
  EXPECT_LT(ch().records_bytes() - withheld_record, 1000u);
  link.client(nack(1, 1, false, true));
  EXPECT_EQ(link.to_broker(), frames({nack(1, 2, false, true)}));
  EXPECT_TRUE(link.observer.client_returns.empty());
  unfill_budget();
}

// An observer that wants every body before it decides: the delivery is to be buffered.
class NeedsBody : public RecordingObserver {
 public:
  DeliveryPlan on_delivery(const Delivery& d) override {
    DeliveryPlan plan = RecordingObserver::on_delivery(d);
    if (!d.body_complete) plan.action = DeliveryPlan::Action::need_body;
    return plan;
  }
};

TEST(HostileBodySize, ABodySizeThatWouldWrapTheBufferCostIsForwardedNotBuffered) {
  BodyBudget budget(kLimit);
  SessionOptions o;
  o.body_budget = &budget;
  NeedsBody observer;
  Session session(o, &observer);
  auto feed = [&](Side from, const Bytes& b) { session.feed(from, b); };
  auto out = [&](Side side) {
    Bytes bytes;
    bytes.swap(session.output(side));
    return bytes;
  };
  HandshakeFrames f = handshake_frames({}, {});
  feed(Side::client, protocol_header());
  feed(Side::broker, f.start);
  feed(Side::client, f.start_ok);
  feed(Side::broker, f.tune);
  std::vector<WireFrame> tune = decode_frames(out(Side::client));
  ASSERT_FALSE(tune.empty());
  f = handshake_frames({}, decode_as<amqp::ConnectionTune>(tune.back()));
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
  EXPECT_TRUE(session.is_open());
}

}  // namespace
}  // namespace nackguard::session::test
