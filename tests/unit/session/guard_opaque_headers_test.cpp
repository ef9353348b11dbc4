// A message whose headers table the codec refuses (nested 10,000 deep, or an unknown type
// letter) is still guarded: it is known by its message_id (or its body), counted, and
// dead-lettered or delayed past its limit. The copy carries the original property bytes with
// nackguard's headers added at the top level; the deep entry is copied byte for byte.

#include <gtest/gtest.h>

#include <algorithm>

#include "proxy/guard/raw_properties.hpp"
#include "session/guard_script.hpp"

namespace nackguard::session::guard_test {
namespace {

constexpr int kDepth = 10000;

// The value of an 'F' field nesting `depth` tables, each holding one key "n" with the next.
Bytes deep_table_value(int depth) {
  Bytes out;
  amqp::ByteWriter w(out);
  for (int i = 0; i < depth; ++i) {
    w.u32(static_cast<std::uint32_t>(7 * (depth - 1 - i)));
    if (i < depth - 1) {
      w.shortstr("n");
      w.u8('F');
    }
  }
  return out;
}

// A top-level entry: name, type letter, value bytes.
Bytes entry(std::string_view name, char type, const Bytes& value) {
  Bytes out;
  amqp::ByteWriter w(out);
  w.shortstr(name);
  w.u8(static_cast<std::uint8_t>(type));
  w.bytes(value);
  return out;
}
Bytes longstr(std::string_view s) {
  Bytes out;
  amqp::ByteWriter w(out);
  w.longstr(s);
  return out;
}

struct Opaque {
  Bytes table_entries;  // the headers table's entries, without its length prefix
  Bytes deep_entry;     // the entry the codec refuses, as its bytes
};

// headers {trace: S "t-<id>", deep: F nested kDepth, x-small: s 7}, or with `unknown` an entry
// of type letter 'Z' in place of the deep one (a length RabbitMQ and nackguard cannot know).
Opaque opaque_headers(const std::string& id, bool unknown = false) {
  Opaque o;
  o.deep_entry =
      unknown ? entry("odd", 'Z', {0, 0, 0, 1}) : entry("deep", 'F', deep_table_value(kDepth));
  o.table_entries = entry("trace", 'S', longstr("t-" + id));
  o.table_entries.insert(o.table_entries.end(), o.deep_entry.begin(), o.deep_entry.end());
  Bytes small = entry("x-small", 's', {0, 7});
  o.table_entries.insert(o.table_entries.end(), small.begin(), small.end());
  return o;
}

// A content header payload: content_type, headers (raw), delivery_mode 2, message_id (unless
// empty), app_id.
Bytes header_payload(std::uint64_t body_size, const Bytes& table_entries, const std::string& id) {
  Bytes out;
  amqp::ByteWriter w(out);
  w.u16(60);
  w.u16(0);
  w.u64(body_size);
  std::uint16_t flags = (1u << 15) | (1u << 13) | (1u << 12) | (1u << 3);
  if (!id.empty()) flags |= 1u << 7;
  w.u16(flags);
  w.shortstr("application/json");
  w.u32(static_cast<std::uint32_t>(table_entries.size()));
  w.bytes(table_entries);
  w.u8(2);
  if (!id.empty()) w.shortstr(id);
  w.shortstr("orders");
  return out;
}

Bytes raw_delivery(std::uint64_t tag, const Bytes& header, std::string_view body, bool redelivered,
                   std::string exchange = "ex", std::string routing_key = "rk") {
  amqp::BasicDeliver d = test::deliver_method(kConsumer, tag, redelivered, std::move(exchange),
                                              std::move(routing_key));
  Bytes out = method(kCh, d);
  amqp::append_frame(out, FrameType::header, kCh, header);
  Bytes b = body_frame(kCh, body);
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

bool contains(const Bytes& haystack, const Bytes& needle) {
  return std::search(haystack.begin(), haystack.end(), needle.begin(), needle.end()) !=
         haystack.end();
}

class GuardOpaqueHeaders : public GuardTest {
 protected:
  // The copy at frames[0..2]: publish, header payload (decoded leniently), body.
  struct RawCopy {
    amqp::BasicPublish publish;
    Bytes header;
    RawProperties props;
    Bytes body;
    std::string header_text(std::string_view name) const {
      return text(props.header.properties.headers->find(name));
    }
  };
  RawCopy take_raw_copy(const std::vector<Wire>& sent) {
    RawCopy copy;
    EXPECT_EQ(sent.size(), 3u);
    if (sent.size() < 3) return copy;
    copy.publish = as<amqp::BasicPublish>(sent[0]);
    EXPECT_EQ(sent[1].type, static_cast<std::uint8_t>(FrameType::header));
    EXPECT_EQ(sent[1].channel, kProxyChannel);
    copy.header = sent[1].payload;
    EXPECT_TRUE(decode_properties(copy.header, copy.props));
    copy.body = sent[2].payload;
    return copy;
  }
};

TEST_F(GuardOpaqueHeaders, DeepHeadersAreCountedAndDeadLetteredAfterMaxRedeliveries) {
  start(policy(3));
  const std::string body = "poison with deep headers";
  const Opaque o = opaque_headers("m1");
  const Bytes header = header_payload(body.size(), o.table_entries, "m1");
  amqp::ContentHeader strict;
  ASSERT_EQ(amqp::decode_content_header(header, strict), amqp::HeaderError::bad_table);

  // Returns 1..3 are within the limit, and counted: the first forwarded (the redelivered flag
  // carries it), the second republished with its count (the deep entry copied byte for byte),
  // the copy's first forwarded again.
  deliver_passes(raw_delivery(1, header, body, false));
  client_passes(nack(kCh, 1));
  EXPECT_EQ(tracked("m1")->returns, 1u);
  deliver_passes(raw_delivery(2, header, body, true));
  client(nack(kCh, 2));
  EXPECT_EQ(tracked("m1")->returns, 2u);
  const std::vector<Wire> republished = open_proxy_channel();
  RawCopy second = take_raw_copy(republished);
  EXPECT_EQ(second.publish.routing_key, "q");
  EXPECT_TRUE(contains(second.header, o.deep_entry));
  EXPECT_EQ(second.header_text("x-nackguard-returns"), text(amqp::FieldValue::i64(2)));
  confirm(1);
  EXPECT_EQ(to_broker(), frames({ack(kCh, 2)}));
  broker(raw_delivery(3, second.header, body, false));
  EXPECT_EQ(to_client(), decode_frames(raw_delivery(3, second.header, body, true)));  // a retry
  client_passes(nack(kCh, 3));
  EXPECT_EQ(tracked("m1")->returns, 3u);
  // Return 4 is past it: dead-lettered.
  deliver_passes(raw_delivery(4, second.header, body, true));
  client(nack(kCh, 4));
  EXPECT_EQ(to_broker(), frames({method(kProxyChannel, passive_declare("q.dlq"))}));
  broker(declare_ok("q.dlq"));
  RawCopy copy = take_raw_copy(to_broker());
  EXPECT_EQ(copy.publish.routing_key, "q.dlq");
  EXPECT_EQ(copy.body, bytes_of(body));
  // Every other property as it was, the deep entry byte for byte, nackguard's headers added.
  const amqp::BasicProperties& p = copy.props.header.properties;
  EXPECT_TRUE(copy.props.opaque);
  EXPECT_EQ(p.message_id, "m1");
  EXPECT_EQ(p.content_type, "application/json");
  EXPECT_EQ(p.delivery_mode, 2);
  EXPECT_EQ(p.app_id, "orders");
  EXPECT_TRUE(contains(copy.header, o.deep_entry));
  ASSERT_EQ(copy.props.entries.size(), 3u + 11u);
  EXPECT_EQ(copy.props.entries[0].name, "trace");
  EXPECT_EQ(copy.props.entries[1].name, "deep");
  EXPECT_EQ(copy.props.entries[2].name, "x-small");
  EXPECT_EQ(copy.header_text("trace"), text(amqp::FieldValue::string("t-m1")));
  EXPECT_EQ(copy.header_text("x-nackguard-returns"), text(amqp::FieldValue::i64(4)));
  EXPECT_EQ(copy.header_text("x-nackguard-reason"),
            text(amqp::FieldValue::string("max_redeliveries")));
  EXPECT_EQ(copy.header_text("x-nackguard-queue"), text(amqp::FieldValue::string("q")));
  EXPECT_EQ(copy.header_text("x-nackguard-deliveries"), text(amqp::FieldValue::i64(4)));
  EXPECT_EQ(copy.header_text("x-nackguard-consumer"),
            text(amqp::FieldValue::string("test-client 1.0")));
  EXPECT_EQ(copy.header_text("x-original-exchange"), text(amqp::FieldValue::string("ex")));
  EXPECT_EQ(copy.header_text("x-original-routingKey"), text(amqp::FieldValue::string("rk")));

  confirm(2);
  EXPECT_EQ(to_broker(), frames({ack(kCh, 4)}));
  EXPECT_TRUE(client_bytes().empty());
  EXPECT_EQ(listener.returns, 4);
  EXPECT_EQ(listener.requeues,
            (std::vector<retry::Action>{retry::Action::forward, retry::Action::republish,
                                        retry::Action::forward, retry::Action::dead_letter}));
  ASSERT_EQ(listener.dead_letters.size(), 1u);
  EXPECT_EQ(listener.dead_letters[0].identity, "message_id:m1");
  EXPECT_EQ(listener.dead_letters[0].returns, 4u);
  EXPECT_TRUE(listener.fallbacks.empty());
  EXPECT_EQ(context->tracker().stats().entries, 0u);
}

TEST_F(GuardOpaqueHeaders, WithoutMessageIdTheBodyIdentifiesIt) {
  retry::Policy p = policy(1);
  p.identity = {{retry::IdentitySource::Kind::message_id, ""},
                {retry::IdentitySource::Kind::body, ""}};
  start(p);
  const std::string body = "anonymous deep poison";
  const Bytes header = header_payload(body.size(), opaque_headers("x").table_entries, "");
  deliver_passes(raw_delivery(1, header, body, false));
  client_passes(nack(kCh, 1));
  EXPECT_EQ(context->tracker().stats().entries, 1u);
  deliver_passes(raw_delivery(2, header, body, true));
  client(nack(kCh, 2));
  open_proxy_channel();
  broker(declare_ok("q.dlq"));
  RawCopy copy = take_raw_copy(to_broker());
  EXPECT_EQ(copy.header_text("x-nackguard-returns"), text(amqp::FieldValue::i64(2)));
  confirm(1);
  EXPECT_EQ(to_broker(), frames({ack(kCh, 2)}));
  ASSERT_EQ(listener.dead_letters.size(), 1u);
  EXPECT_EQ(listener.dead_letters[0].identity.rfind("body:", 0), 0u);
  EXPECT_EQ(listener.requeues,
            (std::vector<retry::Action>{retry::Action::forward, retry::Action::dead_letter}));
}

TEST_F(GuardOpaqueHeaders, DelayedCopyCarriesItsCountBackFromTheDelayQueue) {
  retry::Policy p = policy(2);
  p.requeue = retry::RequeueMode::delayed;
  start(p);
  const std::string body = "delayed deep";
  const Opaque o = opaque_headers("d1");
  const Bytes header = header_payload(body.size(), o.table_entries, "d1");
  deliver_passes(raw_delivery(1, header, body, false));
  client(nack(kCh, 1));
  open_proxy_channel();
  broker(declare_ok("nackguard.delay.q.1000ms"));
  RawCopy first = take_raw_copy(to_broker());
  EXPECT_EQ(first.publish.routing_key, "nackguard.delay.q.1000ms");
  EXPECT_EQ(first.header_text("x-nackguard-returns"), text(amqp::FieldValue::i64(1)));
  EXPECT_TRUE(contains(first.header, o.deep_entry));
  confirm(1);
  EXPECT_EQ(to_broker(), frames({ack(kCh, 1)}));

  // The proxy restarts (a fresh tracker): the copy comes back from the delay queue and its
  // count is read from its top-level header, past the deep entry.
  start(p);
  broker(raw_delivery(1, first.header, body, false, "", "q"));
  EXPECT_EQ(to_client(), decode_frames(raw_delivery(1, first.header, body, true, "", "q")));
  client(nack(kCh, 1));
  open_proxy_channel();
  broker(declare_ok("nackguard.delay.q.2000ms"));
  RawCopy second = take_raw_copy(to_broker());
  EXPECT_EQ(second.header_text("x-nackguard-returns"), text(amqp::FieldValue::i64(2)));
  // Replaced, not added twice; the first route is kept.
  EXPECT_EQ(second.props.entries.size(), first.props.entries.size());
  EXPECT_EQ(second.header_text("x-original-routingKey"), text(amqp::FieldValue::string("rk")));
  confirm(1);
  EXPECT_EQ(to_broker(), frames({ack(kCh, 1)}));

  broker(raw_delivery(2, second.header, body, false, "", "q"));
  EXPECT_EQ(to_client(), decode_frames(raw_delivery(2, second.header, body, true, "", "q")));
  client(nack(kCh, 2));
  EXPECT_EQ(to_broker(), frames({method(kProxyChannel, passive_declare("q.dlq"))}));
  broker(declare_ok("q.dlq"));
  RawCopy dead = take_raw_copy(to_broker());
  EXPECT_EQ(dead.header_text("x-nackguard-returns"), text(amqp::FieldValue::i64(3)));
  EXPECT_TRUE(contains(dead.header, o.deep_entry));
  confirm(2);
  EXPECT_EQ(to_broker(), frames({ack(kCh, 2)}));
  ASSERT_EQ(listener.dead_letters.size(), 1u);
  EXPECT_EQ(listener.dead_letters[0].returns, 3u);
}

TEST_F(GuardOpaqueHeaders, UnknownTypeLetterKeepsTheTableAsItIs) {
  start(policy(1));
  const std::string body = "odd header";
  const Opaque o = opaque_headers("u1", true);
  const Bytes header = header_payload(body.size(), o.table_entries, "u1");
  deliver_passes(raw_delivery(1, header, body, false));
  client_passes(nack(kCh, 1));
  deliver_passes(raw_delivery(2, header, body, true));
  client(nack(kCh, 2));
  open_proxy_channel();
  broker(declare_ok("q.dlq"));
  std::vector<Wire> sent = to_broker();
  ASSERT_EQ(sent.size(), 3u);
  // Its top-level entries cannot be walked: the copy's properties are the original's bytes.
  EXPECT_EQ(sent[1].payload, header);
  confirm(1);
  EXPECT_EQ(to_broker(), frames({ack(kCh, 2)}));
  ASSERT_EQ(listener.dead_letters.size(), 1u);
  EXPECT_EQ(listener.dead_letters[0].identity, "message_id:u1");
}

TEST_F(GuardOpaqueHeaders, CopyPastFrameMaxFallsBackToTheConsumersRequeue) {
  start(policy(0));
  connect(kProxyChannel, 4096);  // frame_max 4096
  const std::string body = "big header";
  // 40 deep (past the codec's 32), and a string that leaves no room for nackguard's headers.
  Bytes entries = entry("deep", 'F', deep_table_value(40));
  const Bytes filler = entry("filler", 'S', longstr(std::string(3600, 'x')));
  entries.insert(entries.end(), filler.begin(), filler.end());
  const Bytes header = header_payload(body.size(), entries, "f1");
  ASSERT_LE(header.size() + amqp::kFrameOverhead, 4096u);
  deliver_passes(raw_delivery(1, header, body, false));
  // Past the limit at once, but the copy would not fit one frame: the consumer's own nack
  // goes to the broker, and the fallback is reported.
  client(nack(kCh, 1));
  EXPECT_EQ(to_broker(), frames({nack(kCh, 1)}));
  ASSERT_EQ(listener.fallbacks.size(), 1u);
  EXPECT_EQ(listener.fallbacks[0].cause, retry::FallbackCause::malformed_properties);
  EXPECT_TRUE(listener.dead_letters.empty());
}

}  // namespace
}  // namespace nackguard::session::guard_test

namespace nackguard::session::guard_test {
namespace {

TEST(RawProperties, DecodesEverythingAroundTheDeepEntry) {
  const Opaque o = opaque_headers("m9");
  const Bytes header = header_payload(3, o.table_entries, "m9");
  RawProperties props;
  ASSERT_TRUE(decode_properties(header, props));
  EXPECT_TRUE(props.opaque);
  EXPECT_TRUE(props.entries_known);
  ASSERT_EQ(props.entries.size(), 3u);
  // The deep entry is left out of the decoded headers; the others are there, in order.
  const amqp::FieldTable& headers = *props.header.properties.headers;
  ASSERT_EQ(headers.entries.size(), 2u);
  EXPECT_EQ(headers.entries[0].first, "trace");
  EXPECT_EQ(headers.entries[1].first, "x-small");
  EXPECT_EQ(headers.entries[1].second, amqp::FieldValue::i16(7));
  EXPECT_EQ(props.header.body_size, 3u);
  EXPECT_EQ(props.header.properties.message_id, "m9");
  EXPECT_EQ(props.header.properties.app_id, "orders");
  // Without edits, a copy is the original's bytes.
  Bytes copy;
  ASSERT_TRUE(copy_properties(header, props, {}, copy));
  EXPECT_EQ(copy, Bytes(header.begin() + 12, header.end()));
}

TEST(RawProperties, AHeaderTheCodecAcceptsIsNotOpaque) {
  const Message m = message("plain");
  Bytes frame = content_header(kCh, 4, m.properties);
  const Bytes payload(frame.begin() + 7, frame.end() - 1);
  RawProperties props;
  ASSERT_TRUE(decode_properties(payload, props));
  EXPECT_FALSE(props.opaque);
  EXPECT_EQ(props.header.properties, m.properties);
}

TEST(RawProperties, ATruncatedTableIsStillMalformed) {
  Bytes entries = opaque_headers("t").table_entries;
  Bytes header = header_payload(3, entries, "t");
  ASSERT_GT(entries.size(), 2u);
  // Cut inside the table (erase, not resize: GCC 12 at -O1 under ASan cannot see that a
  // shrinking resize never fills, and -Wstringop-overflow fails the build).
  header.erase(header.end() - static_cast<std::ptrdiff_t>(entries.size() / 2), header.end());
  RawProperties props;
  EXPECT_FALSE(decode_properties(header, props));
}

}  // namespace
}  // namespace nackguard::session::guard_test
