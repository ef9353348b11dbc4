// Deliveries taken over at their delivery, and delivery tag renumbering: the client sees no gap,
// and its settlements reach the broker under the broker's tags without touching the proxy's.

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "session/script.hpp"

namespace nackguard::session::test {
namespace {

using Events = std::vector<std::string>;
namespace mid = amqp::mid;

constexpr std::uint64_t kUnknownTagBit = std::uint64_t{1} << 63;

// What RabbitMQ makes of the acks, nacks and rejects on one channel (rabbit_channel's
// collect_acks): a single tag must be outstanding; a multiple one settles every outstanding
// tag up to it and must itself be outstanding, except 0, which means all.
class BrokerLedger {
 public:
  explicit BrokerLedger(std::set<std::uint64_t> outstanding)
      : outstanding(std::move(outstanding)) {}

  void apply(const std::vector<WireFrame>& frames, std::uint16_t channel) {
    for (const WireFrame& f : frames) {
      if (f.channel != channel || !error.empty()) continue;
      if (f.is(mid::basic_ack)) {
        auto m = decode_as<amqp::BasicAck>(f);
        settle(m.delivery_tag, m.multiple, "ack");
      } else if (f.is(mid::basic_nack)) {
        auto m = decode_as<amqp::BasicNack>(f);
        settle(m.delivery_tag, m.multiple, m.requeue ? "nack requeue" : "nack");
      } else if (f.is(mid::basic_reject)) {
        auto m = decode_as<amqp::BasicReject>(f);
        settle(m.delivery_tag, false, m.requeue ? "reject requeue" : "reject");
      }
    }
  }

  std::set<std::uint64_t> outstanding;
  std::map<std::uint64_t, std::string> outcome;
  std::string error;  // the first PRECONDITION_FAILED the broker would close the channel with

 private:
  void settle(std::uint64_t tag, bool multiple, const std::string& what) {
    if (multiple && tag == 0) {
      for (std::uint64_t t : outstanding) outcome[t] = what;
      outstanding.clear();
      return;
    }
    if (!outstanding.count(tag)) {
      error = "unknown delivery tag " + std::to_string(tag);
      return;
    }
    auto end = multiple ? outstanding.upper_bound(tag) : std::next(outstanding.find(tag));
    auto begin = multiple ? outstanding.begin() : outstanding.find(tag);
    for (auto it = begin; it != end; ++it) outcome[*it] = what;
    outstanding.erase(begin, end);
  }
};

class SessionTakeover : public ::testing::Test {
 protected:
  void SetUp() override {
    handshake(link);
    link.client(method(1, amqp::BasicConsume{0, "q", "c1", false, false, false, false, {}}));
    link.broker(method(1, amqp::BasicConsumeOk{"c1"}));
    link.client_bytes();
    link.broker_bytes();
    link.observer.take_events();
  }
  // Broker tags first..last on channel 1, with body "m<tag>"; what the client got is kept.
  void deliver_range(std::uint64_t first, std::uint64_t last, std::uint16_t ch = 1) {
    for (std::uint64_t tag = first; tag <= last; ++tag) {
      link.broker(deliver(ch, "c1", tag, "m" + std::to_string(tag)));
    }
    client_saw = link.to_client();
  }
  std::vector<WireFrame> client_sends(const Bytes& frame) {
    link.client(frame);
    return link.to_broker();
  }
  // The client's basic.get of "q" on channel 1 passes to the broker.
  void client_gets() {
    const Bytes get = method(1, get_method("q"));
    link.client(get);
    EXPECT_EQ(link.broker_bytes(), get);
  }
  // The broker's get-ok for broker tag `tag`, 4 messages left in "q".
  static amqp::BasicGetOk get_ok_with_four_left(std::uint64_t tag) {
    amqp::BasicGetOk get_ok = get_ok_method(tag);
    get_ok.message_count = 4;
    return get_ok;
  }

  Link link;
  std::vector<WireFrame> client_saw;
};

TEST_F(SessionTakeover, ClientSeesNoGapAndNothingOfTheTakenOverDelivery) {
  link.observer.take_over_at_delivery = {{1, 2}};
  deliver_range(1, 5);
  EXPECT_EQ(client_saw, frames({deliver(1, "c1", 1, "m1"), deliver(1, "c1", 2, "m3"),
                                deliver(1, "c1", 3, "m4"), deliver(1, "c1", 4, "m5")}));
  EXPECT_EQ(link.observer.take_events(),
            (Events{"delivery ch1 b1", "delivery ch1 b2", "taken-over ch1 b2 m2", "delivery ch1 b3",
                    "delivery ch1 b4", "delivery ch1 b5"}));
  ASSERT_EQ(link.observer.taken_over.size(), 1u);
  EXPECT_TRUE(link.observer.taken_over[0].taken_over);
  EXPECT_EQ(link.observer.taken_over[0].client_tag, 0u);
  EXPECT_TRUE(link.observer.taken_over[0].body_complete);
  EXPECT_EQ(link.session.channel(1)->taken_over_count(), 1u);
  EXPECT_EQ(link.session.channel(1)->unacked_count(), 4u);
  EXPECT_EQ(link.session.channel(1)->find_unacked(3)->broker_tag, 4u);
}

TEST_F(SessionTakeover, TakenOverBodyFramesAreRetainedWholeAndInOrder) {
  link.observer.take_over_at_delivery = {{1, 1}};
  link.broker(cat({method(1, deliver_method("c1", 1)), content(1, "abcdefgh", {}, 3)}));
  link.broker(deliver(1, "c1", 2, "next"));
  EXPECT_EQ(link.to_client(), frames({deliver(1, "c1", 1, "next")}));
  EXPECT_EQ(link.observer.take_events(),
            (Events{"delivery ch1 b1", "taken-over ch1 b1 abcdefgh", "delivery ch1 b2"}));
}

TEST_F(SessionTakeover, AnEmptyBodyIsTakenOverWhole) {
  link.observer.take_over_at_delivery = {{1, 1}};
  link.broker(cat({method(1, deliver_method("c1", 1)), header(1, 0)}));
  EXPECT_TRUE(link.client_bytes().empty());
  EXPECT_EQ(link.session.channel(1)->taken_over_count(), 1u);
  EXPECT_EQ(link.observer.take_events(), (Events{"delivery ch1 b1", "taken-over ch1 b1 "}));
}

TEST_F(SessionTakeover, AckOfAClientTagReachesTheBrokerUnderItsTag) {
  link.observer.take_over_at_delivery = {{1, 2}};
  deliver_range(1, 5);
  link.observer.take_events();
  EXPECT_EQ(client_sends(ack(1, 3)), frames({ack(1, 4)}));
  EXPECT_EQ(link.observer.take_events(), Events{"settled ch1 b4 c3 ack"});
  EXPECT_EQ(client_sends(ack(1, 1)), frames({ack(1, 1)}));
}

TEST_F(SessionTakeover, MultipleAckOverATakenOverTagIsExpanded) {
  link.observer.take_over_at_delivery = {{1, 2}};
  deliver_range(1, 5);
  link.observer.take_events();
  std::vector<WireFrame> out = client_sends(ack(1, 4, true));
  EXPECT_EQ(out, frames({ack(1, 1), ack(1, 3), ack(1, 4), ack(1, 5)}));
  EXPECT_EQ(link.observer.take_events(),
            (Events{"settled ch1 b1 c1 ack", "settled ch1 b3 c2 ack", "settled ch1 b4 c3 ack",
                    "settled ch1 b5 c4 ack"}));
  BrokerLedger ledger({1, 2, 3, 4, 5});
  ledger.apply(out, 1);
  EXPECT_EQ(ledger.error, "");
  EXPECT_EQ(ledger.outstanding, std::set<std::uint64_t>{2});
}

TEST_F(SessionTakeover, MultipleAckSkipsTagsAlreadySettled) {
  link.observer.take_over_at_delivery = {{1, 2}};
  deliver_range(1, 5);
  EXPECT_EQ(client_sends(ack(1, 3)), frames({ack(1, 4)}));
  EXPECT_EQ(client_sends(ack(1, 4, true)), frames({ack(1, 1), ack(1, 3), ack(1, 5)}));
}

TEST_F(SessionTakeover, AckAllOverATakenOverTagIsExpanded) {
  link.observer.take_over_at_delivery = {{1, 3}};
  deliver_range(1, 4);
  EXPECT_EQ(client_sends(ack(1, 0, true)), frames({ack(1, 1), ack(1, 2), ack(1, 4)}));
  // Nothing of the client's is left: "all" names nothing and must not reach the broker,
  // where it would take the taken-over delivery with it.
  EXPECT_EQ(client_sends(ack(1, 0, true)), frames({}));
  EXPECT_EQ(link.session.channel(1)->taken_over_count(), 1u);
}

TEST_F(SessionTakeover, MultipleAckBelowEveryTakenOverTagIsOneFrame) {
  link.observer.take_over_at_delivery = {{1, 2}, {1, 5}};
  deliver_range(1, 6);
  // Client tags 1..4 are broker tags 1, 3, 4, 6.
  EXPECT_EQ(client_saw, frames({deliver(1, "c1", 1, "m1"), deliver(1, "c1", 2, "m3"),
                                deliver(1, "c1", 3, "m4"), deliver(1, "c1", 4, "m6")}));
  ASSERT_TRUE(link.session.settle_taken_over(1, 2, SettleKind::ack, false));
  EXPECT_EQ(link.to_broker(), frames({ack(1, 2)}));
  std::vector<WireFrame> out = client_sends(ack(1, 3, true));
  EXPECT_EQ(out, frames({ack(1, 4, true)}));
  BrokerLedger ledger({1, 3, 4, 5, 6});
  ledger.apply(out, 1);
  EXPECT_EQ(ledger.error, "");
  EXPECT_EQ(ledger.outstanding, (std::set<std::uint64_t>{5, 6}));
}

TEST_F(SessionTakeover, NackAndRejectAreMappedLikeAcks) {
  link.observer.take_over_at_delivery = {{1, 2}};
  deliver_range(1, 6);  // client tags 1..5 are broker tags 1, 3, 4, 5, 6
  link.observer.take_events();
  EXPECT_EQ(client_sends(nack(1, 2, false, true)), frames({nack(1, 3, false, true)}));
  EXPECT_EQ(client_sends(reject(1, 3, false)), frames({reject(1, 4, false)}));
  EXPECT_EQ(client_sends(reject(1, 4, true)), frames({reject(1, 5, true)}));
  EXPECT_EQ(client_sends(nack(1, 5, true, true)),
            frames({nack(1, 1, false, true), nack(1, 6, false, true)}));
  EXPECT_EQ(link.observer.take_events(),
            (Events{"client-return ch1 b3 c2 nack", "settled ch1 b4 c3 reject",
                    "client-return ch1 b5 c4 reject", "client-return ch1 b1 c1 nack",
                    "client-return ch1 b6 c5 nack"}));
}

TEST_F(SessionTakeover, UnknownTagsStillFailAtTheBroker) {
  link.observer.take_over_at_delivery = {{1, 2}};
  deliver_range(1, 3);  // client tags 1, 2 are broker tags 1, 3
  EXPECT_EQ(client_sends(ack(1, 99)), frames({ack(1, kUnknownTagBit | 99)}));
  EXPECT_EQ(client_sends(reject(1, 7, true)), frames({reject(1, kUnknownTagBit | 7, true)}));
  EXPECT_EQ(client_sends(ack(1, 1)), frames({ack(1, 1)}));
  // Acked already: as unknown as a tag never issued.
  EXPECT_EQ(client_sends(nack(1, 1, false, false)),
            frames({nack(1, kUnknownTagBit | 1, false, false)}));
  EXPECT_EQ(link.observer.settled.size(), 1u);
}

TEST_F(SessionTakeover, UnknownMultipleTagStillFailsAtTheBroker) {
  // RabbitMQ refuses a multiple ack whose own tag is not outstanding, even with lower tags
  // outstanding. After renumbering the proxy must keep that: the client acked a tag it was
  // never given, and the broker would have closed the channel.
  link.observer.take_over_at_delivery = {{1, 2}};
  deliver_range(1, 3);  // client tags 1, 2 are broker tags 1, 3
  std::vector<WireFrame> out = client_sends(ack(1, 7, true));
  BrokerLedger ledger({1, 2, 3});
  ledger.apply(out, 1);
  EXPECT_EQ(out, frames({ack(1, kUnknownTagBit | 7, true)}));
}

TEST_F(SessionTakeover, GetOkIsRenumberedToo) {
  link.observer.take_over_at_delivery = {{1, 1}};
  deliver_range(1, 1);
  client_gets();
  amqp::BasicGetOk get_ok = get_ok_with_four_left(2);
  link.broker(cat({method(1, get_ok), content(1, "got")}));
  get_ok.delivery_tag = 1;
  EXPECT_EQ(link.to_client(), frames({method(1, get_ok), content(1, "got")}));
  EXPECT_EQ(client_sends(ack(1, 1)), frames({ack(1, 2)}));
}

// Issue 38: a basic.get whose message the proxy takes over (to delay or dead-letter it) is
// answered all the same, with get-empty: a polling client would otherwise wait for ever.
TEST_F(SessionTakeover, ATakenOverGetOkIsAnsweredGetEmpty) {
  link.observer.take_over_at_delivery = {{1, 1}};
  client_gets();
  amqp::BasicGetOk get_ok = get_ok_with_four_left(1);
  link.broker(cat({method(1, get_ok), content(1, "kept")}));
  EXPECT_EQ(link.to_client(), frames({method(1, amqp::BasicGetEmpty{})}));
  ASSERT_EQ(link.observer.taken_over.size(), 1u);
  EXPECT_TRUE(link.observer.taken_over[0].from_get);
  // The next get is answered as the broker answers it.
  client_gets();
  get_ok.delivery_tag = 2;
  link.broker(cat({method(1, get_ok), content(1, "next")}));
  get_ok.delivery_tag = 1;  // renumbered: the client never saw the broker's 1
  EXPECT_EQ(link.to_client(), frames({method(1, get_ok), content(1, "next")}));
}

TEST_F(SessionTakeover, SettleTakenOverInjectsOneFrameUnderTheBrokerTag) {
  link.observer.take_over_at_delivery = {{1, 2}, {1, 3}, {1, 4}};
  deliver_range(1, 5);
  link.observer.take_events();
  EXPECT_TRUE(link.session.settle_taken_over(1, 2, SettleKind::ack, false));
  EXPECT_EQ(link.to_broker(), frames({ack(1, 2)}));
  EXPECT_TRUE(link.session.settle_taken_over(1, 3, SettleKind::nack, true));
  EXPECT_EQ(link.to_broker(), frames({nack(1, 3, false, true)}));
  EXPECT_TRUE(link.session.settle_taken_over(1, 4, SettleKind::reject, false));
  EXPECT_EQ(link.to_broker(), frames({reject(1, 4, false)}));
  EXPECT_TRUE(link.to_client().empty());
  // Settled once; again, or a tag the proxy never took over, is refused and sends nothing.
  EXPECT_FALSE(link.session.settle_taken_over(1, 2, SettleKind::ack, false));
  EXPECT_FALSE(link.session.settle_taken_over(1, 1, SettleKind::ack, false));
  EXPECT_FALSE(link.session.settle_taken_over(9, 2, SettleKind::ack, false));
  EXPECT_TRUE(link.broker_bytes().empty());
  EXPECT_TRUE(link.observer.take_events().empty());
  EXPECT_EQ(link.session.channel(1)->taken_over_count(), 0u);
}

TEST_F(SessionTakeover, NothingTakenOverMeansSettlementsPassAsTheirOriginalBytes) {
  link.observer.take_over_at_delivery = {{2, 1}};  // another channel's takeover changes nothing
  deliver_range(1, 4);
  link.broker(deliver(2, "c1", 1));
  link.client_bytes();
  // A stray reserved bit: a re-encoded frame would lose it.
  Bytes odd_ack = raw_method(1, 60, 80, Bytes{0, 0, 0, 0, 0, 0, 0, 1, 0x02});
  link.client(odd_ack);
  EXPECT_EQ(link.broker_bytes(), odd_ack);
  Bytes multiple = ack(1, 3, true);
  link.client(multiple);
  EXPECT_EQ(link.broker_bytes(), multiple);
  Bytes nack_all = nack(1, 0, true, true);
  link.client(nack_all);
  EXPECT_EQ(link.broker_bytes(), nack_all);
  EXPECT_EQ(link.observer.settled.size(), 3u);
  EXPECT_EQ(link.observer.client_returns.size(), 1u);
}

TEST_F(SessionTakeover, RecoverReturnsTakenOverDeliveriesToo) {
  link.observer.take_over_at_delivery = {{1, 1}};
  deliver_range(1, 2);
  link.observer.take_events();
  link.client(method(1, amqp::BasicRecover{true}));
  EXPECT_EQ(link.observer.take_events(),
            (Events{"returned ch1 b2 recover", "returned ch1 b1 recover"}));
  EXPECT_FALSE(link.session.settle_taken_over(1, 1, SettleKind::ack, false));
}

TEST_F(SessionTakeover, TakenOverRequeueNeverReachesTheBroker) {
  link.observer.take_over = {{1, 2}};
  deliver_range(1, 4);  // nothing taken over: client tags are broker tags
  link.observer.take_events();
  EXPECT_EQ(client_sends(nack(1, 2, false, true)), frames({}));
  EXPECT_EQ(link.observer.take_events(),
            (Events{"client-return ch1 b2 c2 nack", "taken-over ch1 b2 <no body>"}));
  EXPECT_EQ(link.session.channel(1)->taken_over_count(), 1u);
  // The proxy owns broker tag 2 now: a multiple ack over it is expanded around it.
  std::vector<WireFrame> out = client_sends(ack(1, 4, true));
  EXPECT_EQ(out, frames({ack(1, 1), ack(1, 3), ack(1, 4)}));
  ASSERT_TRUE(link.session.settle_taken_over(1, 2, SettleKind::reject, false));
  std::vector<WireFrame> settle = link.to_broker();
  EXPECT_EQ(settle, frames({reject(1, 2, false)}));
  BrokerLedger ledger({1, 2, 3, 4});
  ledger.apply(out, 1);
  ledger.apply(settle, 1);
  EXPECT_EQ(ledger.error, "");
  EXPECT_EQ(ledger.outcome[2], "reject");
  EXPECT_EQ(ledger.outstanding, std::set<std::uint64_t>{});
}

TEST_F(SessionTakeover, MultipleRequeueWithOneTakenOverIsExpandedAroundIt) {
  link.observer.take_over = {{1, 2}};
  deliver_range(1, 4);
  link.observer.take_events();
  std::vector<WireFrame> out = client_sends(nack(1, 4, true, true));
  EXPECT_EQ(out,
            frames({nack(1, 1, false, true), nack(1, 3, false, true), nack(1, 4, false, true)}));
  EXPECT_EQ(link.observer.take_events(),
            (Events{"client-return ch1 b1 c1 nack", "client-return ch1 b2 c2 nack",
                    "taken-over ch1 b2 <no body>", "client-return ch1 b3 c3 nack",
                    "client-return ch1 b4 c4 nack"}));
  BrokerLedger ledger({1, 2, 3, 4});
  ledger.apply(out, 1);
  EXPECT_EQ(ledger.error, "");
  EXPECT_EQ(ledger.outstanding, std::set<std::uint64_t>{2});
}

TEST_F(SessionTakeover, DeferredSettlementIsNotOvertakenByAClientMultipleAck) {
  link.observer.take_over_at_delivery = {{1, 2}};
  deliver_range(1, 3);  // client tags 1, 2 are broker tags 1, 3
  amqp::BasicPublish publish;
  publish.routing_key = "q";
  // The client is in the middle of a publish on channel 2: injections wait for its end.
  link.client(cat({method(2, publish), header(2, 4)}));
  ASSERT_TRUE(link.session.settle_taken_over(1, 2, SettleKind::nack, true));
  // Frames of other channels may interleave with channel 2's content.
  link.client(ack(1, 2, true));
  link.client(body(2, "data"));
  std::vector<WireFrame> out = link.to_broker();
  BrokerLedger ledger({1, 2, 3});
  ledger.apply(out, 1);
  EXPECT_EQ(ledger.error, "");
  EXPECT_EQ(ledger.outcome[2], "nack requeue");
  EXPECT_EQ(ledger.outstanding, std::set<std::uint64_t>{});
}

TEST_F(SessionTakeover, DeferredSettlementLostAtEofIsReturned) {
  link.observer.take_over_at_delivery = {{1, 2}};
  deliver_range(1, 2);
  amqp::BasicPublish publish;
  link.client(cat({method(2, publish), header(2, 4)}));
  link.broker_bytes();
  ASSERT_TRUE(link.session.settle_taken_over(1, 2, SettleKind::ack, false));
  link.observer.take_events();
  link.session.on_eof(Side::client);
  EXPECT_TRUE(link.broker_bytes().empty());  // the ack never left: the broker requeues it
  EXPECT_EQ(link.observer.take_events(),
            (Events{"returned ch1 b1 connection_closed", "returned ch1 b2 connection_closed"}));
}

}  // namespace
}  // namespace nackguard::session::test
