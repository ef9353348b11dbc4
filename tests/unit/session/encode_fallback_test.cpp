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
    EXPECT_EQ(listener.fallbacks[0].cause, retry::FallbackCause::encode_failed);
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
  client(nack(kCh, 1));
  EXPECT_EQ(open_proxy_channel(), frames({method(kProxyChannel, passive_declare(dlq))}));
  broker(declare_ok(dlq));
  Copy copy = only_copy(to_broker());
  EXPECT_EQ(copy.publish.exchange, "");
  EXPECT_EQ(copy.publish.routing_key, dlq);
  confirm(1);
  EXPECT_EQ(to_broker(), frames({ack(kCh, 1)}));
  EXPECT_TRUE(listener.fallbacks.empty());
  ASSERT_EQ(listener.dead_letters.size(), 1u);
}

TEST_F(GuardEncode, AnExchangeNameThatDoesNotEncodeFallsBackWithNothingHalfSent) {
  retry::Policy p = policy(0);
  p.dead_letter.exchange = std::string(256, 'x');  // the loader refuses it; code may not
  start(p);
  deliver_passes(delivery(1, message("m1")));
  client(nack(kCh, 1));
  // No header or body frame without its method: only the consumer's own nack.
  EXPECT_EQ(open_proxy_channel(), frames({nack(kCh, 1)}));
  expect_encode_fallback("the basic.publish to exchange \"" + p.dead_letter.exchange +
                         "\" with routing key \"q.dlq\" does not encode (a name over 255 bytes)");
  // The queue's copies are not paused: the next one is tried (and fails the same way).
  deliver_passes(delivery(2, message("m2")));
  client(nack(kCh, 2));
  EXPECT_EQ(to_broker(), frames({nack(kCh, 2)}));
  EXPECT_EQ(listener.fallbacks.size(), 2u);
  EXPECT_EQ(listener.fallbacks[1].cause, retry::FallbackCause::encode_failed);
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
  client(nack(kCh, 1));
  EXPECT_EQ(open_proxy_channel(), frames({method(kProxyChannel, passive_declare("q.dlq"))}));
  broker(declare_ok("q.dlq"));
  EXPECT_EQ(to_broker(), frames({nack(kCh, 1)}));
  expect_encode_fallback("the copy's content header is larger than frame_max");
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
