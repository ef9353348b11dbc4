#pragma once
// Frames to feed a Session, built with the codec's own encoders: the session tests' scripts
// (script.hpp) and the session fuzz target (tests/fuzz/fuzz_session.cpp) share them. No gtest:
// a frame that does not encode throws.

#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "amqp/codec_test_support.hpp"
#include "proxy/amqp/frame.hpp"
#include "proxy/amqp/method_codec.hpp"

namespace nackguard::session::test {

using amqp::Bytes;
using amqp::ByteView;
using amqp::FrameType;

// ---- building frames to feed ----

using amqp::test::cat;  // the codec tests' concatenation

// The one frame `bytes` hold, decoded (it points into `bytes`). Anything else is the test's
// mistake: std::logic_error.
inline amqp::Frame only_frame(const Bytes& bytes) {
  amqp::FrameDecoder decoder(amqp::kFrameMinSize * 64);
  amqp::FrameResult r = decoder.decode(bytes);
  if (r.status != amqp::FrameResult::Status::frame || r.frame.raw.size() != bytes.size()) {
    throw std::logic_error("only_frame: not exactly one frame");
  }
  return r.frame;
}

inline Bytes frame(FrameType type, std::uint16_t channel, ByteView payload) {
  Bytes out;
  amqp::append_frame(out, type, channel, payload);
  return out;
}

// A method that does not encode is a mistake in the script: it throws (gtest reports it).
template <typename M>
Bytes method(std::uint16_t channel, const M& m) {
  Bytes out;
  if (!amqp::append_method_frame(out, channel, m)) {
    throw std::logic_error("a scripted method frame does not encode");
  }
  return out;
}

// A method frame with any class and method ids, followed by `args` as they are.
inline Bytes raw_method(std::uint16_t channel, std::uint16_t class_id, std::uint16_t method_id,
                        ByteView args = {}) {
  Bytes payload;
  amqp::ByteWriter w(payload);
  w.u16(class_id);
  w.u16(method_id);
  w.bytes(args);
  return frame(FrameType::method, channel, payload);
}

inline Bytes header(std::uint16_t channel, std::uint64_t body_size,
                    const amqp::BasicProperties& properties = {}) {
  amqp::ContentHeader h;
  h.body_size = body_size;
  h.properties = properties;
  Bytes out;
  if (!amqp::append_content_header_frame(out, channel, h)) {
    throw std::logic_error("a scripted content header does not encode");
  }
  return out;
}

inline Bytes body(std::uint16_t channel, std::string_view data) {
  return frame(FrameType::body, channel, amqp::as_bytes(data));
}

// The tx class's methods (class 90), which have no fields.
inline Bytes tx_select(std::uint16_t channel = 1) {
  return raw_method(channel, 90, 10);
}
inline Bytes tx_commit(std::uint16_t channel = 1) {
  return raw_method(channel, 90, 20);
}
inline Bytes tx_commit_ok(std::uint16_t channel = 1) {
  return raw_method(channel, 90, 21);
}
inline Bytes tx_rollback(std::uint16_t channel = 1) {
  return raw_method(channel, 90, 30);
}

inline Bytes heartbeat() {
  Bytes out;
  amqp::append_heartbeat(out);
  return out;
}

// A connection.close or a channel.close with `code` and `text`; a channel.close names the
// method that caused it, if any.
inline amqp::ConnectionClose connection_close_method(std::uint16_t code, std::string text = "") {
  amqp::ConnectionClose close;
  close.reply_code = code;
  close.reply_text = std::move(text);
  return close;
}
inline amqp::ChannelClose channel_close_method(std::uint16_t code, std::string text = "",
                                               std::uint16_t class_id = 0,
                                               std::uint16_t method_id = 0) {
  amqp::ChannelClose close;
  close.reply_code = code;
  close.reply_text = std::move(text);
  close.class_id = class_id;
  close.method_id = method_id;
  return close;
}

// The connection.close the proxy sends the broker once a gone client's connection is done
// (session_core_end.cpp): the broker's close-ok ends it.
inline Bytes gone_client_close() {
  return method(0, connection_close_method(200, "nackguard: the client connection ended"));
}

// A content header and `data` split into body frames of at most `chunk` bytes.
inline Bytes content(std::uint16_t channel, std::string_view data,
                     const amqp::BasicProperties& properties = {}, std::size_t chunk = 1 << 20) {
  Bytes out = header(channel, data.size(), properties);
  for (std::size_t at = 0; at < data.size(); at += chunk) {
    Bytes b = body(channel, data.substr(at, chunk));
    out.insert(out.end(), b.begin(), b.end());
  }
  return out;
}

inline amqp::BasicDeliver deliver_method(std::string consumer_tag, std::uint64_t tag,
                                         bool redelivered = false, std::string exchange = "ex",
                                         std::string routing_key = "rk") {
  amqp::BasicDeliver m;
  m.consumer_tag = std::move(consumer_tag);
  m.delivery_tag = tag;
  m.redelivered = redelivered;
  m.exchange = std::move(exchange);
  m.routing_key = std::move(routing_key);
  return m;
}

// basic.deliver, its header and one body frame.
inline Bytes deliver(std::uint16_t channel, std::string consumer_tag, std::uint64_t tag,
                     std::string_view data = "payload") {
  return cat(
      {method(channel, deliver_method(std::move(consumer_tag), tag)), content(channel, data)});
}

// A client's settlements: the channel, then the method's fields in their wire order. What a
// consumer mostly sends is the default: a single tag, and a nack or reject that requeues.
inline Bytes ack(std::uint16_t channel, std::uint64_t tag, bool multiple = false) {
  return method(channel, amqp::BasicAck{tag, multiple});
}
inline Bytes nack(std::uint16_t channel, std::uint64_t tag, bool multiple = false,
                  bool requeue = true) {
  return method(channel, amqp::BasicNack{tag, multiple, requeue});
}
inline Bytes reject(std::uint16_t channel, std::uint64_t tag, bool requeue = true) {
  return method(channel, amqp::BasicReject{tag, requeue});
}

inline Bytes protocol_header() {
  return Bytes(std::begin(amqp::kProtocolHeader), std::end(amqp::kProtocolHeader));
}

inline amqp::BasicConsume consume_method(std::string queue, std::string tag, bool no_ack = false,
                                         bool no_wait = false) {
  amqp::BasicConsume m;
  m.queue = std::move(queue);
  m.consumer_tag = std::move(tag);
  m.no_ack = no_ack;
  m.no_wait = no_wait;
  return m;
}

inline amqp::BasicGet get_method(std::string queue, bool no_ack = false) {
  amqp::BasicGet m;
  m.queue = std::move(queue);
  m.no_ack = no_ack;
  return m;
}

inline amqp::BasicGetOk get_ok_method(std::uint64_t tag) {
  amqp::BasicGetOk m;
  m.delivery_tag = tag;
  m.exchange = "ex";
  m.routing_key = "rk";
  return m;
}

// ---- the connection handshake ----

struct HandshakeParams {
  std::uint16_t broker_channel_max = 2047;
  std::uint32_t broker_frame_max = 131072;
  std::uint16_t broker_heartbeat = 60;
  // What the client answers in tune-ok; nullopt takes what the proxy offered.
  std::optional<std::uint16_t> client_channel_max = std::nullopt;
  std::optional<std::uint32_t> client_frame_max = std::nullopt;
  std::optional<std::uint16_t> client_heartbeat = std::nullopt;
  std::string vhost = "/";
};

struct HandshakeFrames {
  Bytes start, start_ok, tune, tune_ok, open, open_ok;
};

inline HandshakeFrames handshake_frames(const HandshakeParams& p,
                                        const amqp::ConnectionTune& offered) {
  HandshakeFrames f;
  amqp::ConnectionStart start;
  start.server_properties.set("product", amqp::FieldValue::string("RabbitMQ"));
  amqp::FieldTable capabilities;
  capabilities.set("basic.nack", amqp::FieldValue::boolean(true));
  capabilities.set("consumer_cancel_notify", amqp::FieldValue::boolean(true));
  start.server_properties.set("capabilities", amqp::FieldValue::table(capabilities));
  start.mechanisms = "PLAIN AMQPLAIN";
  start.locales = "en_US";
  f.start = method(0, start);

  amqp::ConnectionStartOk start_ok;
  start_ok.client_properties.set("product", amqp::FieldValue::string("test-client"));
  // A type letter the proxy must not normalise: it forwards the original bytes.
  start_ok.client_properties.set("x-int", amqp::FieldValue::i16(7));
  start_ok.mechanism = "PLAIN";
  start_ok.response = std::string("\0guest\0guest", 12);
  start_ok.locale = "en_US";
  f.start_ok = method(0, start_ok);

  f.tune =
      method(0, amqp::ConnectionTune{p.broker_channel_max, p.broker_frame_max, p.broker_heartbeat});
  amqp::ConnectionTuneOk tune_ok;
  tune_ok.channel_max = p.client_channel_max.value_or(offered.channel_max);
  tune_ok.frame_max = p.client_frame_max.value_or(offered.frame_max);
  tune_ok.heartbeat = p.client_heartbeat.value_or(offered.heartbeat);
  f.tune_ok = method(0, tune_ok);

  amqp::ConnectionOpen open;
  open.virtual_host = p.vhost;
  f.open = method(0, open);
  f.open_ok = method(0, amqp::ConnectionOpenOk{});
  return f;
}

}  // namespace nackguard::session::test
