// A delivery's content header is decoded once per decision: what the decision decoded goes
// with it to the copy (Guard::Intent::props) and to the choice of hashing the body, instead of
// being decoded again.

#include <gtest/gtest.h>

#include "proxy/amqp/properties.hpp"
#include "session/guard_script.hpp"

namespace nackguard::session::guard_test {
namespace {

class GuardDecodeOnce : public GuardTest {};

TEST_F(GuardDecodeOnce, AReturnDecodesTheHeaderOnceForItsDecisionAndItsCopy) {
  retry::Policy p = policy(10);
  p.requeue = retry::RequeueMode::delayed;
  start(p);
  deliver_passes(delivery(1, message("m1")));
  const std::uint64_t before = amqp::content_headers_decoded();
  client(nack(kCh, 1));
  EXPECT_EQ(amqp::content_headers_decoded() - before, 1u);
  // The copy was built from it, with the proxy's headers.
  open_proxy_channel();
  broker(declare_ok("nackguard.delay.q.1000ms"));
  EXPECT_EQ(take_copy(to_broker()).header_text("x-nackguard-returns"),
            text(amqp::FieldValue::i64(1)));
}

TEST_F(GuardDecodeOnce, ATakeoverAtTheDeliveryDecodesTheHeaderOnceForItsDecisionAndItsCopy) {
  start(policy(5));
  // A quorum queue's redelivery whose x-delivery-count leaves no room under the limit assumed
  // when none is known: republished before the client sees it.
  const Message m = with_delivery_count(message("m1"), 1);
  const std::uint64_t before = amqp::content_headers_decoded();
  broker(delivery(1, m, true));
  EXPECT_EQ(amqp::content_headers_decoded() - before, 1u);
  // Taken over, and its copy built from it.
  EXPECT_TRUE(to_client().empty());
  Copy copy = take_copy(open_proxy_channel());
  EXPECT_EQ(copy.publish.routing_key, "q");
  EXPECT_EQ(copy.header_text("x-nackguard-returns"), text(amqp::FieldValue::i64(1)));
  EXPECT_EQ(copy.header_text("x-delivery-count"), "absent");
}

TEST_F(GuardDecodeOnce, AFirstDeliveryThatKeepsNoBodyDecodesTheHeaderOnce) {
  start(policy(3));
  Message m = message("m1");
  m.body.assign(8192, 'x');  // past the size below which the body is hashed undecided
  const std::uint64_t before = amqp::content_headers_decoded();
  deliver_passes(delivery(1, m));
  EXPECT_EQ(amqp::content_headers_decoded() - before, 1u);
  const Delivery* d = conn->session.channel(kCh)->find_unacked(1);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->body, nullptr);         // a first delivery: its first return is forwarded
  EXPECT_FALSE(d->body_hash.known());  // message_id identifies it: no hash needed
}

}  // namespace
}  // namespace nackguard::session::guard_test
