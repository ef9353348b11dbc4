#pragma once
// The frames, messages and policies of the guard tests (guard_script.hpp): the client's and
// the broker's frames under the names these tests use, messages with ids and return counts,
// and the copies the proxy publishes decoded back.

#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "proxy/amqp/frame.hpp"
#include "proxy/amqp/method_codec.hpp"
#include "proxy/retry/policy.hpp"
#include "session/script.hpp"

namespace nackguard::guard {}

namespace nackguard::session::guard_test {

// The guard's own names (proxy/guard/), under the guard tests' namespace.
using namespace nackguard::guard;

using amqp::Bytes;
using amqp::ByteView;
using amqp::FrameType;
namespace mid = amqp::mid;

inline constexpr std::int64_t kT0 = 1'700'000'000'000;  // the wall clock when a test starts
inline constexpr std::uint16_t kProxyChannel = 2047;    // the broker's channel_max
inline constexpr std::uint16_t kCh = 1;                 // the client's channel
inline constexpr const char* kQueue = "q";
inline constexpr const char* kConsumer = "c1";

// ---- frames ----
// Built and read with the session tests' own helpers (script.hpp), under the names these
// tests use.

using Wire = test::WireFrame;
using test::ack;
using test::cat;
using test::decode_frames;
using test::frames;
using test::gone_client_close;
using test::method;
using test::nack;
using test::reject;

// The frame decoded as method M; a frame that is not M fails the test.
template <typename M>
M as(const Wire& frame) {
  return test::decode_as<M>(frame);
}

inline Bytes content_header(std::uint16_t channel, std::uint64_t body_size,
                            const amqp::BasicProperties& properties) {
  return test::header(channel, body_size, properties);
}

inline Bytes body_frame(std::uint16_t channel, std::string_view data) {
  return test::body(channel, data);
}

inline Bytes channel_close(std::uint16_t code, std::string text, std::uint16_t class_id = 0,
                           std::uint16_t method_id = 0, std::uint16_t channel = kProxyChannel) {
  return method(channel, test::channel_close_method(code, std::move(text), class_id, method_id));
}
// The broker's basic.return of a mandatory copy to `exchange` and `routing_key` (312 NO_ROUTE),
// then its content with `properties`, the body in one frame for each of `parts`.
inline Bytes no_route(std::string exchange, std::string routing_key,
                      const amqp::BasicProperties& properties,
                      std::initializer_list<std::string_view> parts,
                      std::uint16_t channel = kProxyChannel) {
  std::size_t size = 0;
  for (std::string_view part : parts) size += part.size();
  Bytes out = cat({method(channel, amqp::BasicReturn{312, "NO_ROUTE", std::move(exchange),
                                                     std::move(routing_key)}),
                   content_header(channel, size, properties)});
  for (std::string_view part : parts) out = cat({out, body_frame(channel, part)});
  return out;
}
inline Bytes declare_ok(std::string queue, std::uint16_t channel = kProxyChannel) {
  return method(channel, amqp::QueueDeclareOk{std::move(queue), 0, 0});
}

// What the proxy declares: a passive check, or its own durable queue with `arguments`.
inline amqp::QueueDeclare passive_declare(std::string queue) {
  amqp::QueueDeclare d;
  d.queue = std::move(queue);
  d.passive = true;
  return d;
}
inline amqp::QueueDeclare durable_declare(std::string queue, amqp::FieldTable arguments = {}) {
  amqp::QueueDeclare d;
  d.queue = std::move(queue);
  d.durable = true;
  d.arguments = std::move(arguments);
  return d;
}
// The arguments of a delay queue with `ttl_ms` in front of queue "q".
inline amqp::FieldTable delay_arguments(std::int64_t ttl_ms) {
  amqp::FieldTable args;
  args.set("x-message-ttl", amqp::FieldValue::i64(ttl_ms));
  args.set("x-dead-letter-exchange", amqp::FieldValue::string(""));
  args.set("x-dead-letter-routing-key", amqp::FieldValue::string(kQueue));
  args.set("x-expires", amqp::FieldValue::i64(2 * ttl_ms + 60000));
  return args;
}

// ---- messages ----

struct Message {
  std::string id;
  std::string body;
  amqp::BasicProperties properties;
};

// A message with most properties set, a header table whose type letters must survive, and a
// body holding the frame-end octet and zeros.
inline Message message(const std::string& id, std::optional<std::int64_t> returns_header = {}) {
  Message m;
  m.id = id;
  m.body = std::string("body of ") + id + std::string("\0\xCE\x01\xFF", 4);
  amqp::BasicProperties& p = m.properties;
  p.content_type = "application/json";
  p.delivery_mode = 2;
  p.priority = 3;
  p.correlation_id = "corr-" + id;
  p.message_id = id;
  p.timestamp = 1690000000;
  p.app_id = "orders";
  amqp::FieldTable headers;
  headers.set("trace", amqp::FieldValue::string("t-" + id));
  headers.set("x-small", amqp::FieldValue::i16(7));
  if (returns_header) headers.set("x-nackguard-returns", amqp::FieldValue::i64(*returns_header));
  p.headers = std::move(headers);
  return m;
}

// `m` delivered with broker tag `tag` on kCh to kConsumer from kQueue, as the session hands a
// delivery to its observer once the body is in (retained, so a copy can be made of it).
inline Delivery delivery_value(std::uint64_t tag, const Message& m, bool redelivered = false) {
  Delivery d;
  d.channel = kCh;
  d.broker_tag = d.client_tag = tag;
  d.consumer_tag = kConsumer;
  d.queue = kQueue;
  d.redelivered = redelivered;
  const Bytes frame = test::header(kCh, m.body.size(), m.properties);
  d.header_payload.assign(frame.begin() + amqp::kFrameHeaderSize, frame.end() - 1);
  d.body_size = m.body.size();
  d.body = retry::RetainedBody::make(nullptr, m.body.size());
  const ByteView body = amqp::as_bytes(m.body);
  d.body->bytes.assign(body.begin(), body.end());
  d.body_complete = true;
  return d;
}

// The message as a quorum queue redelivers it: with x-delivery-count `count`.
// `m` with the integer header `name` (a broker's count: x-delivery-count, x-acquired-count).
inline Message with_count(Message m, const std::string& name, std::int64_t count) {
  if (!m.properties.headers) m.properties.headers.emplace();
  m.properties.headers->set(name, amqp::FieldValue::i64(count));
  return m;
}
inline Message with_delivery_count(Message m, std::int64_t count) {
  return with_count(std::move(m), "x-delivery-count", count);
}

inline amqp::BasicProperties without_headers(amqp::BasicProperties p) {
  p.headers.reset();
  return p;
}

// basic.deliver, content header and body frames (of at most `chunk` bytes each).
inline Bytes delivery(std::uint64_t tag, const amqp::BasicProperties& properties,
                      std::string_view body, bool redelivered = false, std::string exchange = "ex",
                      std::string routing_key = "rk", std::size_t chunk = 1 << 16) {
  amqp::BasicDeliver d = test::deliver_method(kConsumer, tag, redelivered, std::move(exchange),
                                              std::move(routing_key));
  Bytes out = cat({method(kCh, d), content_header(kCh, body.size(), properties)});
  for (std::size_t at = 0; at < body.size(); at += chunk) {
    Bytes b = body_frame(kCh, body.substr(at, chunk));
    out.insert(out.end(), b.begin(), b.end());
  }
  return out;
}
inline Bytes delivery(std::uint64_t tag, const Message& m, bool redelivered = false) {
  return delivery(tag, m.properties, m.body, redelivered);
}
// basic.get-ok and its content: `m` answering a basic.get.
inline Bytes get_ok(std::uint64_t tag, const Message& m, bool redelivered = false) {
  amqp::BasicGetOk g{tag, redelivered, "ex", "rk", 0};
  return cat(
      {method(kCh, g), content_header(kCh, m.body.size(), m.properties), body_frame(kCh, m.body)});
}

// A field value as its type letter and value, `absent` for none, so that a failed comparison
// reads as the header it is: l 3, S "ex", T 1700000001.
inline std::string text(const amqp::FieldValue* v) {
  if (!v) return "absent";
  std::string out(1, v->type);
  if (const std::string* s = v->as_string()) return out + " \"" + *s + "\"";
  if (const auto* t = std::get_if<std::uint64_t>(&v->value)) return out + " " + std::to_string(*t);
  if (auto n = v->as_int()) return out + " " + std::to_string(*n);
  return out + " (not shown)";
}
inline std::string text(const amqp::FieldValue& v) {
  return text(&v);
}

// A copy the proxy published: its method, header and the body of its body frames.
struct Copy {
  amqp::BasicPublish publish;
  amqp::ContentHeader header;
  Bytes body;
  std::size_t frames = 0;  // method, header and body frames

  const amqp::FieldValue* header_value(std::string_view name) const {
    return header.properties.headers ? header.properties.headers->find(name) : nullptr;
  }
  // The header `name` of the copy, as text().
  std::string header_text(std::string_view name) const { return text(header_value(name)); }
};

// The publish starting at frames[at], all of it on the proxy's channel.
inline Copy take_copy(const std::vector<Wire>& frames, std::size_t at = 0) {
  Copy copy;
  if (frames.size() < at + 2 || !frames[at].is(mid::basic_publish)) {
    ADD_FAILURE() << "no basic.publish at frame " << at << " of " << frames.size();
    return copy;
  }
  copy.publish = as<amqp::BasicPublish>(frames[at]);
  EXPECT_EQ(frames[at].channel, kProxyChannel);
  const Wire& header = frames[at + 1];
  EXPECT_EQ(header.type, static_cast<std::uint8_t>(FrameType::header));
  EXPECT_EQ(header.channel, kProxyChannel);
  EXPECT_EQ(amqp::decode_content_header(header.payload, copy.header), amqp::HeaderError::none);
  std::size_t i = at + 2;
  while (copy.body.size() < copy.header.body_size && i < frames.size() &&
         frames[i].type == static_cast<std::uint8_t>(FrameType::body)) {
    EXPECT_EQ(frames[i].channel, kProxyChannel);
    copy.body.insert(copy.body.end(), frames[i].payload.begin(), frames[i].payload.end());
    ++i;
  }
  EXPECT_EQ(copy.body.size(), copy.header.body_size);
  copy.frames = i - at;
  return copy;
}

// The copy that is all of `sent`: nothing came before or after it.
inline Copy only_copy(const std::vector<Wire>& sent) {
  Copy copy = take_copy(sent);
  EXPECT_EQ(copy.frames, sent.size()) << "not only the copy was sent";
  return copy;
}

// The message a copy becomes once the broker delivers it: the copy's properties and body.
inline Message delivered(const Message& original, const Copy& copy) {
  Message m = original;
  m.properties = copy.header.properties;
  m.body.assign(copy.body.begin(), copy.body.end());
  return m;
}

inline Bytes bytes_of(std::string_view text) {
  ByteView view = amqp::as_bytes(text);
  return Bytes(view.begin(), view.end());
}

// ---- policies ----

// A policy for queue "q" that forwards every return up to `max_redeliveries`, never sees an
// outage, never rate-limits, and identifies messages by message_id.
inline retry::Policy policy(std::uint32_t max_redeliveries) {
  retry::Policy p;
  p.queue = kQueue;
  p.max_redeliveries = max_redeliveries;
  p.identity = {{retry::IdentitySource::Kind::message_id, ""}};
  p.requeue = retry::RequeueMode::immediate;
  p.backoff.initial = retry::Millis(1000);
  p.backoff.multiplier = 2.0;
  p.backoff.jitter = retry::Backoff::Jitter::none;
  p.rate.per_message = 1000;
  p.rate.min_messages = 1000000;
  return p;
}

// policy(max_redeliveries) whose queue is in outage once half of at least `min_messages`
// messages were returned.
inline retry::Policy outage_policy(std::uint32_t max_redeliveries, std::uint32_t min_messages) {
  retry::Policy p = policy(max_redeliveries);
  p.rate.min_messages = min_messages;
  p.rate.outage_ratio = 0.5;
  return p;
}

}  // namespace nackguard::session::guard_test
