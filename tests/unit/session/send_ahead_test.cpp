// Frames written before the session handles them (Session::receive_input, as the relay does
// over plain TCP): only a first delivery alone in its read, on a channel where handling is
// known to forward it unchanged; and handling then queues none of its bytes again.

#include <gtest/gtest.h>

#include "session/guard_script.hpp"
#include "session/relay_read.hpp"
#include "session/tracking_fixture.hpp"

namespace nackguard::session::test {
namespace {

class SessionSendAhead : public SessionTracking {
 protected:
  void SetUp() override {
    SessionTracking::SetUp();
    consume(1, "q", "c1");
  }
  // Reads `bytes` from the broker as the relay does, writing at most `write` of the bytes
  // offered ahead; returns what was offered.
  ByteView read(const Bytes& bytes, std::size_t write = SIZE_MAX) {
    return relay_read(link.session, bytes, [&](ByteView ahead) {
      written_.assign(ahead.begin(), ahead.begin() + std::min(write, ahead.size()));
      return written_.size();
    });
  }
  // What the client got: the bytes written ahead, then what the session queued.
  Bytes to_client() {
    Bytes out = written_;
    ByteView run = link.session.forwarded(Side::client);
    out.insert(out.end(), run.begin(), run.end());
    link.session.forwarded_written(Side::client, run.size());
    Bytes rest = link.client_bytes();
    out.insert(out.end(), rest.begin(), rest.end());
    written_.clear();
    return out;
  }
  // A delivery that is not written ahead, yet reaches the client as it is.
  void not_ahead(const Bytes& bytes) {
    EXPECT_TRUE(read(bytes).empty());
    EXPECT_EQ(to_client(), bytes);
  }

  Bytes written_;
};

TEST_F(SessionSendAhead, TheWholeDeliveryGoesAheadAndIsQueuedNoMore) {
  Bytes delivery = deliver(1, "c1", 1, std::string(1024, 'x'));
  ByteView ahead = read(delivery);
  EXPECT_EQ(Bytes(ahead.begin(), ahead.end()), delivery);
  EXPECT_TRUE(link.session.forwarded(Side::client).empty());
  EXPECT_TRUE(link.client_bytes().empty());
  // Handled all the same: recorded as unacked, and the ack reaches the broker as it is.
  link.session.finish_bookkeeping();
  ASSERT_EQ(link.observer.deliveries.size(), 1u);
  EXPECT_NE(link.session.channel(1)->find_unacked(1), nullptr);
  client_passes(ack(1, 1));
  EXPECT_EQ(link.session.channel(1)->find_unacked(1), nullptr);
  EXPECT_FALSE(link.session.close_after_flush(Side::client));
}

TEST_F(SessionSendAhead, WhatTheSocketDidNotTakeIsQueuedFromWhereItStopped) {
  for (std::size_t cut : {1u, 30u, 200u}) {
    SCOPED_TRACE("written " + std::to_string(cut));
    Bytes d = deliver(1, "c1", link.session.channel(1)->last_client_tag() + 1, "body");
    EXPECT_EQ(read(d, cut).size(), d.size());
    EXPECT_EQ(to_client(), d);
  }
  EXPECT_FALSE(link.session.close_after_flush(Side::client));
}

TEST_F(SessionSendAhead, OnlyAFirstDeliveryAloneInItsRead) {
  // Redelivered, or with a headers table (a count or a copy's mark may be among them).
  Bytes redelivered = cat({method(1, deliver_method("c1", 1, true)), content(1, "a")});
  not_ahead(redelivered);
  amqp::BasicProperties with_headers;
  with_headers.headers = amqp::FieldTable{};
  not_ahead(cat({method(1, deliver_method("c1", 2)), content(1, "b", with_headers)}));
  // Two deliveries in one read, a delivery and a heartbeat, a delivery cut short.
  not_ahead(cat({deliver(1, "c1", 3), deliver(1, "c1", 4)}));
  not_ahead(cat({deliver(1, "c1", 5), heartbeat()}));
  Bytes whole = deliver(1, "c1", 6);
  Bytes cut(whole.begin(), whole.end() - 3);
  EXPECT_TRUE(read(cut).empty());
  EXPECT_TRUE(read(Bytes(whole.end() - 3, whole.end())).empty())
      << "the rest of a frame kept from the last read";
  EXPECT_EQ(to_client(), whole);
  // The next one alone is written ahead again.
  Bytes next = deliver(1, "c1", 7);
  EXPECT_EQ(read(next).size(), next.size());
  EXPECT_EQ(to_client(), next);
}

TEST_F(SessionSendAhead, NotWhenHandlingCouldTakeItOverOrRenumberIt) {
  // An observer that may take a first delivery over.
  link.observer.take_over_at_delivery.insert({1, 1});
  EXPECT_TRUE(read(deliver(1, "c1", 1)).empty());
  EXPECT_TRUE(to_client().empty()) << "taken over: the client never sees it";
  link.observer.take_over_at_delivery.clear();
  // From now on the client's tags differ from the broker's: the tag is patched.
  Bytes second = deliver(1, "c1", 2);
  EXPECT_TRUE(read(second).empty());
  EXPECT_EQ(to_client(), deliver(1, "c1", 1));
}

TEST_F(SessionSendAhead, NotBehindAnythingQueuedForTheClient) {
  link.broker(deliver(1, "c1", 1));  // queued, not written yet
  Bytes second = deliver(1, "c1", 2);
  EXPECT_TRUE(read(second).empty());
  EXPECT_EQ(to_client(), cat({deliver(1, "c1", 1), second}));
}

TEST_F(SessionSendAhead, NotOnAChannelTheClientIsClosing) {
  link.client(method(1, amqp::ChannelClose{}));
  drain();
  not_ahead(deliver(1, "c1", 1));
}

TEST_F(SessionSendAhead, AFrameTheCodecRefusesIsNotWrittenAhead) {
  // basic.deliver cut inside its routing key: the connection is closed, nothing written.
  Bytes bad = raw_method(1, 60, 60, Bytes{2, 'c', '1', 0, 0, 0, 0, 0, 0, 0, 1, 0, 2, 'e', 'x', 9});
  EXPECT_TRUE(read(cat({bad, content(1, "a")})).empty());
  EXPECT_TRUE(link.session.close_after_flush(Side::broker));
}

TEST_F(SessionSendAhead, BytesWrittenAheadThatHandlingWithholdsCloseTheConnection) {
  // A relay that writes what receive_input did not offer: the session takes the delivery
  // over, so the client holds a delivery no record stands for. The connection ends (541 to
  // the broker, which requeues what the client held) rather than going on inconsistent.
  link.observer.take_over_at_delivery.insert({1, 1});
  Bytes delivery = deliver(1, "c1", 1);
  ByteView offered = relay_read(link.session, delivery, [&](ByteView) { return delivery.size(); });
  EXPECT_TRUE(offered.empty());
  EXPECT_TRUE(link.session.close_after_flush(Side::broker));
  std::vector<WireFrame> to_broker = link.to_broker();
  ASSERT_FALSE(to_broker.empty());
  EXPECT_EQ(decode_as<amqp::ConnectionClose>(to_broker.back()).reply_code, 541);
}

// With the guard: first deliveries go ahead before and after returns it forwards or takes over;
// a redelivery, which it must count first, does not.
class GuardSendAhead : public guard_test::GuardTest {
 protected:
  // The client gets `bytes` exactly once: `ahead` of them written first, the rest queued.
  void reaches_client(const Bytes& bytes, bool ahead) {
    Bytes written;
    ByteView offered = relay_read(conn->session, bytes, [&](ByteView ahead) {
      written.assign(ahead.begin(), ahead.end());
      return written.size();
    });
    EXPECT_EQ(offered.size(), ahead ? bytes.size() : 0u);
    Bytes out = written;
    ByteView run = conn->session.forwarded(Side::client);
    out.insert(out.end(), run.begin(), run.end());
    conn->session.forwarded_written(Side::client, run.size());
    Bytes rest = client_bytes();
    out.insert(out.end(), rest.begin(), rest.end());
    EXPECT_EQ(out, bytes);
  }
};

TEST_F(GuardSendAhead, FirstDeliveriesGoAheadAroundAReturnForwardedAndOneTakenOver) {
  start(guard_test::policy(1));
  guard_test::Message m = guard_test::message("m1");
  m.properties.headers.reset();
  reaches_client(guard_test::delivery(1, m), true);
  client_passes(nack(1, 1));  // return 1: within the limit, forwarded
  reaches_client(guard_test::delivery(2, m, true), false);
  client(nack(1, 2));  // return 2: past it, taken over to be dead-lettered
  EXPECT_TRUE(to_broker().size() > 0u);
  reaches_client(guard_test::delivery(3, guard_test::message("m2").properties, "b"), false);
  guard_test::Message plain = guard_test::message("m3");
  plain.properties.headers.reset();
  // The proxy owns broker tag 2 now, yet tag 4 is the client's next: it goes ahead.
  reaches_client(guard_test::delivery(4, plain), true);
  EXPECT_EQ(listener.deliveries, 4);
  EXPECT_FALSE(conn->session.close_after_flush(Side::client));
}

}  // namespace
}  // namespace nackguard::session::test
