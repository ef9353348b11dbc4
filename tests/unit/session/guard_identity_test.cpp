// Messages without a message_id are known by their body (with the route they first took):
// a redelivery is buffered until its body is in, then decided and handed out intact; a copy
// coming back from a delay queue is the same message as its original.

#include <gtest/gtest.h>

#include "session/guard_script.hpp"

namespace nackguard::session::guard_test {
namespace {

class GuardIdentity : public GuardTest {
 protected:
  static retry::Policy by_body(std::uint32_t max_redeliveries) {
    retry::Policy p = policy(max_redeliveries);
    p.identity = {{retry::IdentitySource::Kind::message_id, ""},
                  {retry::IdentitySource::Kind::body, ""}};
    return p;
  }
  static Message anonymous(const std::string& body) {
    Message m = message("unused");
    m.properties.message_id.reset();
    m.body = body;
    return m;
  }
};

TEST_F(GuardIdentity, RedeliveryKnownByItsBodyIsBufferedThenHandedOutIntact) {
  start(by_body(1));
  const Message m = anonymous("the same body, twice");
  deliver_passes(delivery(1, m));
  client_passes(nack(kCh, 1));
  EXPECT_EQ(context->tracker().stats().entries, 1u);

  // Redelivered: the decision needs the body. Header and first body frame are kept back...
  const Bytes redelivery = delivery(2, m.properties, m.body, true, "ex", "rk", 8);
  const std::size_t last_frame = amqp::kFrameOverhead + (m.body.size() - 1) % 8 + 1;
  const std::size_t before_last_body = redelivery.size() - last_frame;
  broker(Bytes(redelivery.begin(), redelivery.begin() + before_last_body));
  EXPECT_TRUE(client_bytes().empty());
  // ...until the last one; within the limit (1 of 1), it goes out as it came.
  broker(Bytes(redelivery.begin() + before_last_body, redelivery.end()));
  EXPECT_EQ(to_client(), decode_frames(redelivery));

  // The second return is past the limit: the same identity was found.
  client(nack(kCh, 2));
  EXPECT_EQ(open_proxy_channel(), frames({method(kProxyChannel, passive_declare("q.dlq"))}));
  broker(declare_ok("q.dlq"));
  Copy copy = take_copy(to_broker());
  EXPECT_EQ(copy.header_text("x-nackguard-returns"), text(amqp::FieldValue::i64(2)));
  confirm(1);
  EXPECT_EQ(to_broker(), frames({ack(kCh, 2)}));
  ASSERT_EQ(listener.dead_letters.size(), 1u);
  EXPECT_EQ(listener.dead_letters[0].identity.rfind("body:", 0), 0u)
      << listener.dead_letters[0].identity;
  EXPECT_EQ(context->tracker().stats().entries, 0u);
}

TEST_F(GuardIdentity, CopyBackFromTheDelayQueueIsTheSameMessage) {
  retry::Policy p = by_body(10);
  p.requeue = retry::RequeueMode::delayed;
  start(p);
  const Message m = anonymous("delayed by body");
  deliver_passes(delivery(1, m));
  client(nack(kCh, 1));
  open_proxy_channel();
  broker(declare_ok("nackguard.delay.q.1000ms"));
  Copy first = take_copy(to_broker());
  confirm(1);
  EXPECT_EQ(to_broker(), frames({ack(kCh, 1)}));

  // Dead-lettered back by the default exchange: another route, but x-original-* name the
  // first one, so the body identity is the original's.
  retry_passes(delivery(2, first.header.properties, amqp::as_chars(first.body), false, "", "q"));
  client(nack(kCh, 2));
  std::vector<Wire> declare = to_broker();
  ASSERT_EQ(declare.size(), 1u);
  EXPECT_EQ(as<amqp::QueueDeclare>(declare[0]).queue, "nackguard.delay.q.2000ms");
  EXPECT_EQ(context->tracker().stats().entries, 1u);
  ASSERT_EQ(listener.requeues.size(), 1u);
}

}  // namespace
}  // namespace nackguard::session::guard_test
