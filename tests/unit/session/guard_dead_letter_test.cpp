// Dead-lettering through a real Session and Guard: the return over the limit never reaches
// the broker; the proxy's own channel declares the DLQ, publishes a copy with confirms, and
// only the confirm lets the original's ack go out.

#include <gtest/gtest.h>

#include "session/guard_script.hpp"

namespace nackguard::session::guard_test {
namespace {

using retry::DeadLetterReason;

class GuardDeadLetter : public GuardTest {};

// The seconds of a wall-clock time in milliseconds, as the x-nackguard-*-return headers carry.
std::uint64_t seconds(std::int64_t ms) {
  return static_cast<std::uint64_t>(ms / 1000);
}

TEST_F(GuardDeadLetter, ThirdNackPastTheLimitIsDeadLetteredOnlyAfterTheConfirm) {
  start(policy(2));
  Message m = message("m1");

  // Returns 1 and 2 are within the limit. The first: the client's own nack bytes reach the
  // broker, and the redelivered flag carries it. The second: a copy with its count, to the
  // queue's tail, and the original acked once the copy is confirmed.
  deliver_passes(delivery(1, m));
  now += 1000;
  client_passes(nack(kCh, 1));
  const std::int64_t first_return = kT0 + 1000;
  deliver_passes(delivery(2, m, true));
  now += 1000;
  client(nack(kCh, 2));
  const Copy second = take_copy(open_proxy_channel());
  EXPECT_EQ(second.publish.routing_key, "q");
  confirm(1);
  EXPECT_EQ(to_broker(), frames({ack(kCh, 2)}));
  m = delivered(m, second);
  retry_passes(delivery(3, m));
  now += 1000;
  const std::int64_t last_return = now;

  // Return 3 is past max_redeliveries 2: the nack is kept.
  client(nack(kCh, 3));
  // The DLQ may exist with arguments of its own: a passive declare first.
  std::vector<Wire> sent = to_broker();
  EXPECT_EQ(sent, frames({method(kProxyChannel, passive_declare("q.dlq"))}));

  // 404: absent. The channel is closed by it; the proxy answers, reopens and declares it.
  broker(channel_close(404, "NOT_FOUND - no queue 'q.dlq' in vhost '/'", 50, 10));
  EXPECT_EQ(reopen_proxy_channel(), frames({method(kProxyChannel, durable_declare("q.dlq"))}));

  broker(declare_ok("q.dlq"));
  Copy copy = only_copy(to_broker());  // the copy, and no ack of the original yet
  EXPECT_EQ(copy.publish.exchange, "");
  EXPECT_EQ(copy.publish.routing_key, "q.dlq");
  EXPECT_TRUE(copy.publish.mandatory);
  EXPECT_FALSE(copy.publish.immediate);
  EXPECT_EQ(copy.body, bytes_of(m.body));
  // Every property as it was; the original headers first, in order, then nackguard's (those
  // of the earlier copy where they were, then the dead-letter's).
  EXPECT_EQ(without_headers(copy.header.properties), without_headers(m.properties));
  ASSERT_TRUE(copy.header.properties.headers);
  const auto& entries = copy.header.properties.headers->entries;
  ASSERT_EQ(entries.size(), 2u + 11u);
  EXPECT_EQ(entries[0], m.properties.headers->entries[0]);
  EXPECT_EQ(entries[1], m.properties.headers->entries[1]);
  EXPECT_EQ(entries[1].second.type, 's');
  using amqp::FieldValue;
  const auto expect_header = [&](const char* name, const FieldValue& value) {
    EXPECT_EQ(copy.header_text(name), text(value)) << name;
  };
  expect_header("x-nackguard-reason", FieldValue::string("max_redeliveries"));
  expect_header("x-nackguard-returns", FieldValue::i64(3));
  expect_header("x-nackguard-deliveries", FieldValue::i64(3));
  expect_header("x-nackguard-queue", FieldValue::string("q"));
  expect_header("x-nackguard-consumer", FieldValue::string("test-client 1.0"));
  expect_header("x-nackguard-first-return", FieldValue::timestamp(seconds(first_return)));
  expect_header("x-nackguard-last-return", FieldValue::timestamp(seconds(last_return)));
  expect_header("x-original-exchange", FieldValue::string("ex"));
  expect_header("x-original-routingKey", FieldValue::string("rk"));
  EXPECT_TRUE(listener.dead_letters.empty());

  // The confirm of publish 1 on the reopened channel: now the original is acked, under the
  // broker's tag.
  confirm(1);
  EXPECT_EQ(to_broker(), frames({ack(kCh, 3)}));
  EXPECT_TRUE(client_bytes().empty());  // the client never saw any of the proxy's traffic
  EXPECT_EQ(listener.dead_letters,
            (std::vector<Dl>{{"q", "message_id:m1", 3, DeadLetterReason::max_redeliveries}}));
  EXPECT_EQ(listener.requeues,
            (std::vector<retry::Action>{retry::Action::forward, retry::Action::republish,
                                        retry::Action::dead_letter}));
  EXPECT_TRUE(listener.fallbacks.empty());
  EXPECT_EQ(listener.returns, 3);
  EXPECT_FALSE(tracked("m1"));  // dead-lettered: forgotten
}

TEST_F(GuardDeadLetter, ExistingDlqIsUsedAsItIsAndDeclaredOncePerChannel) {
  start(policy(0));
  deliver_passes(delivery(1, message("m1")));
  deliver_passes(delivery(2, message("m2")));

  client(nack(kCh, 1));
  EXPECT_EQ(open_proxy_channel(), frames({method(kProxyChannel, passive_declare("q.dlq"))}));
  broker(declare_ok("q.dlq"));  // it exists: no declaration of the proxy's own
  only_copy(to_broker());

  // The next dead-letter on this channel publishes at once, as publish 2.
  client(nack(kCh, 2));
  Copy second = only_copy(to_broker());
  EXPECT_EQ(second.publish.routing_key, "q.dlq");
  EXPECT_EQ(second.body, bytes_of(message("m2").body));

  confirm(2, true);  // one multiple confirm for both
  EXPECT_EQ(to_broker(), frames({ack(kCh, 1), ack(kCh, 2)}));
  ASSERT_EQ(listener.dead_letters.size(), 2u);
  EXPECT_EQ(listener.dead_letters[0].identity, "message_id:m1");
  EXPECT_EQ(listener.dead_letters[1].identity, "message_id:m2");
  EXPECT_EQ(listener.dead_letters[1].returns, 1u);
}

TEST_F(GuardDeadLetter, HeaderCountFromAnEarlierTripCountsAgainstTheLimit) {
  start(policy(3));
  // x-nackguard-returns 5 already: its first nack here is its sixth return.
  const Message m = message("m1", 5);
  retry_passes(delivery(1, m));
  client(nack(kCh, 1));
  EXPECT_EQ(open_proxy_channel(), frames({method(kProxyChannel, passive_declare("q.dlq"))}));
  broker(declare_ok("q.dlq"));
  Copy copy = take_copy(to_broker());
  EXPECT_EQ(copy.header_text("x-nackguard-returns"), text(amqp::FieldValue::i64(6)));
  EXPECT_EQ(copy.header_text("x-nackguard-reason"),
            text(amqp::FieldValue::string("max_redeliveries")));
  // A copy of an earlier trip without x-nackguard-deliveries: this is the one delivery known.
  EXPECT_EQ(copy.header_text("x-nackguard-deliveries"), text(amqp::FieldValue::i64(1)));
  // The header is replaced where it was, not appended twice.
  EXPECT_EQ(copy.header.properties.headers->entries.size(), 3u + 10u);
  EXPECT_EQ(copy.header.properties.headers->entries[2].first, "x-nackguard-returns");
  confirm(1);
  EXPECT_EQ(to_broker(), frames({ack(kCh, 1)}));
  ASSERT_EQ(listener.dead_letters.size(), 1u);
  EXPECT_EQ(listener.dead_letters[0].returns, 6u);
}

TEST_F(GuardDeadLetter, ViaRejectRejectsWithoutRequeueAtOnceAndUsesNoProxyChannel) {
  retry::Policy p = policy(1);
  p.dead_letter.via = retry::DeadLetter::Via::reject;
  start(p);
  const Message m = message("m1");
  deliver_passes(delivery(1, m));
  client_passes(nack(kCh, 1));
  deliver_passes(delivery(2, m, true));

  client(nack(kCh, 2));
  // The broker's own dead-lettering (the queue's x-dead-letter-exchange) takes it.
  EXPECT_EQ(to_broker(), frames({reject(kCh, 2, false)}));
  EXPECT_TRUE(client_bytes().empty());
  EXPECT_EQ(listener.dead_letters,
            (std::vector<Dl>{{"q", "message_id:m1", 2, DeadLetterReason::max_redeliveries}}));
  EXPECT_FALSE(tracked("m1"));

  // Later deliveries on the channel keep their tags mapped.
  deliver_passes(delivery(3, message("m3")));
  client(ack(kCh, 3));
  EXPECT_EQ(to_broker(), frames({ack(kCh, 3)}));
}

TEST_F(GuardDeadLetter, ClientRejectWithRequeueIsDeadLetteredToo) {
  start(policy(0));
  deliver_passes(delivery(1, message("m1")));
  client(reject(kCh, 1));
  EXPECT_EQ(open_proxy_channel(), frames({method(kProxyChannel, passive_declare("q.dlq"))}));
  broker(declare_ok("q.dlq"));
  EXPECT_EQ(take_copy(to_broker()).publish.routing_key, "q.dlq");
  confirm(1);
  EXPECT_EQ(to_broker(), frames({ack(kCh, 1)}));
}

TEST_F(GuardDeadLetter, ExchangeOfThePolicyIsUsedWithoutDeclaringAnything) {
  retry::Policy p = policy(0);
  p.dead_letter.exchange = "dlx";
  p.dead_letter.routing_key = "dead.{queue}";
  start(p);
  deliver_passes(delivery(1, message("m1")));
  client(nack(kCh, 1));
  Copy copy = only_copy(open_proxy_channel());
  EXPECT_EQ(copy.publish.exchange, "dlx");
  EXPECT_EQ(copy.publish.routing_key, "dead.q");
  confirm(1);
  EXPECT_EQ(to_broker(), frames({ack(kCh, 1)}));
}

TEST_F(GuardDeadLetter, MultipleNackIsSplitBetweenTheBrokerAndTheProxy) {
  start(policy(1));
  deliver_passes(delivery(1, message("m1")));   // its first return: within the limit
  retry_passes(delivery(2, message("m2", 1)));  // its second: past it
  retry_passes(delivery(3, message("m3", 1)));
  client(nack(kCh, 3, true));
  // Only m1's requeue reaches the broker, as a single nack: a multiple one would take the
  // deliveries the proxy now owns with it. (The proxy's channel.open was sent while the
  // client's frame was being taken apart.)
  EXPECT_EQ(to_broker(), frames({method(kProxyChannel, amqp::ChannelOpen{}), nack(kCh, 1)}));
  broker(method(kProxyChannel, amqp::ChannelOpenOk{}));
  broker(method(kProxyChannel, amqp::ConfirmSelectOk{}));
  broker(declare_ok("q.dlq"));
  std::vector<Wire> sent = to_broker();
  ASSERT_EQ(sent.size(), 2u + 3u + 3u);  // select and declare, then two copies
  Copy first = take_copy(sent, 2), second = take_copy(sent, 5);
  EXPECT_EQ(first.body, bytes_of(message("m2").body));
  EXPECT_EQ(second.body, bytes_of(message("m3").body));
  confirm(2, true);
  EXPECT_EQ(to_broker(), frames({ack(kCh, 2), ack(kCh, 3)}));
  EXPECT_EQ(listener.dead_letters.size(), 2u);
}

TEST_F(GuardDeadLetter, CopyIsSplitByTheNegotiatedFrameMax) {
  start(policy(0));
  connect(kProxyChannel, /*frame_max=*/4096);
  Message m = message("big");
  m.body.assign(10000, 'x');
  for (std::size_t i = 0; i < m.body.size(); ++i) m.body[i] = static_cast<char>(i % 251);
  deliver_passes(delivery(1, m.properties, m.body, false, "ex", "rk", 4088));
  client(nack(kCh, 1));
  open_proxy_channel();
  broker(declare_ok("q.dlq"));
  std::vector<Wire> sent = to_broker();
  Copy copy = take_copy(sent);
  ASSERT_EQ(copy.frames, 2u + 3u);
  for (std::size_t i = 2; i < sent.size(); ++i) {
    EXPECT_LE(sent[i].payload.size() + amqp::kFrameOverhead, 4096u) << "frame " << i;
  }
  EXPECT_EQ(copy.body, bytes_of(m.body));
}

TEST_F(GuardDeadLetter, PolicyReloadWhileACopyIsInFlight) {
  dead_letter_in_flight();
  // The new policies allow 5 returns; the copy in flight finishes under the old decision.
  context->set_policies(
      std::make_shared<const retry::PolicySet>(std::vector<retry::Policy>{policy(5)}));
  confirm(1);
  EXPECT_EQ(to_broker(), frames({ack(kCh, 1)}));
  ASSERT_EQ(listener.dead_letters.size(), 1u);
  deliver_passes(delivery(2, message("m2")));
  client_passes(nack(kCh, 2));
}

TEST_F(GuardDeadLetter, NackWithoutRequeueIsTheConsumersOwnAndPassesUncounted) {
  start(policy(0));
  deliver_passes(delivery(1, message("m1")));
  client_passes(nack(kCh, 1, false, false));
  EXPECT_EQ(listener.returns, 0);
  EXPECT_TRUE(listener.requeues.empty());
  EXPECT_FALSE(tracked("m1"));
}

TEST_F(GuardDeadLetter, AckOfTheOriginalWaitsForTheClientsPublishToEnd) {
  dead_letter_confirmed_mid_publish();
  EXPECT_TRUE(broker_bytes().empty());
  // Its last body frame, then the proxy's ack: never inside the content sequence.
  client(body_frame(kCh, "def"));
  EXPECT_EQ(to_broker(), frames({body_frame(kCh, "def"), ack(kCh, 1)}));
}

class GuardDeadLetterConsumer : public GuardTest {
 protected:
  // The x-nackguard-consumer of the dead-letter of a first nack under max_redeliveries 0,
  // from a client with `connection_name` on a proxy on host `host`.
  std::string dead_letter_consumer(const std::string& connection_name, const std::string& host) {
    retry::Policy p = policy(0);
    p.dead_letter.exchange = "dlx";  // nothing to declare
    client_properties.set("connection_name", amqp::FieldValue::string(connection_name));
    retry::GuardSettings settings;
    settings.host_name = host;
    start(p, settings);
    deliver_passes(delivery(1, message("m1")));
    client(nack(kCh, 1));
    std::vector<Wire> sent = open_proxy_channel();
    Copy copy = take_copy(sent);
    const amqp::FieldValue* value =
        copy.header.properties.headers
            ? copy.header.properties.headers->find("x-nackguard-consumer")
            : nullptr;
    const std::string* text = value ? value->as_string() : nullptr;
    return text ? *text : "(absent)";
  }
};

TEST_F(GuardDeadLetterConsumer, ConnectionNameAndHost) {
  EXPECT_EQ(dead_letter_consumer("orders-worker", "orders-7d9f-abcde"),
            "orders-worker on orders-7d9f-abcde");
}

TEST_F(GuardDeadLetterConsumer, TenKibConnectionNameIsCutTo255Bytes) {
  std::string label = dead_letter_consumer(std::string(10 * 1024, 'n'), "pod-1");
  EXPECT_EQ(label, std::string(255 - 9, 'n') + " on pod-1");
}

}  // namespace
}  // namespace nackguard::session::guard_test
