#pragma once
// Scripted frames for the session tests. Frames are built with the codec's own encoders, fed
// to a Session, and the session's output is decoded back into frames the tests compare. A
// WireFrame prints as "ch1 basic.ack(60.80) 00 00 ..." so a failed comparison reads as AMQP
// (at most 64 payload bytes, then the size).

#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <iomanip>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "proxy/amqp/frame.hpp"
#include "proxy/amqp/method_codec.hpp"
#include "proxy/amqp/method_name.hpp"
#include "proxy/session/session.hpp"
#include "session/recording_observer.hpp"

namespace nackguard::session::test {

using amqp::Bytes;
using amqp::ByteView;
using amqp::FrameType;

// ---- one frame ----

struct WireFrame {
  std::uint8_t type = 0;
  std::uint16_t channel = 0;
  Bytes payload;

  bool is_method() const { return type == static_cast<std::uint8_t>(FrameType::method); }
  std::optional<std::uint32_t> key() const {
    if (!is_method()) return std::nullopt;
    return amqp::peek_method_key(payload);
  }
  bool is(std::uint32_t method_key) const { return key() == method_key; }
  Bytes bytes() const {
    Bytes out;
    amqp::append_frame(out, static_cast<FrameType>(type), channel, payload);
    return out;
  }
  bool operator==(const WireFrame&) const = default;
};

inline void PrintTo(const WireFrame& frame, std::ostream* os) {
  *os << "ch" << frame.channel << ' ';
  switch (frame.type) {
    case 1: {
      auto key = frame.key();
      if (key) {
        std::string_view name = amqp::method_name(*key);
        *os << (name.empty() ? "method" : name) << '(' << (*key >> 16) << '.' << (*key & 0xFFFF)
            << ')';
      } else {
        *os << "method(short)";
      }
      break;
    }
    case 2:
      *os << "header";
      break;
    case 3:
      *os << "body";
      break;
    case 8:
      *os << "heartbeat";
      break;
    default:
      *os << "type" << int{frame.type};
      break;
  }
  std::ostringstream hex;
  for (std::size_t i = 0; i < frame.payload.size() && i < 64; ++i) {
    hex << ' ' << std::hex << std::setw(2) << std::setfill('0') << int{frame.payload[i]};
  }
  if (frame.payload.size() > 64) hex << " ... (" << std::dec << frame.payload.size() << " bytes)";
  *os << hex.str();
}

inline std::ostream& operator<<(std::ostream& os, const WireFrame& frame) {
  PrintTo(frame, &os);
  return os;
}

// ---- building frames to feed ----

inline Bytes cat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const Bytes& part : parts) out.insert(out.end(), part.begin(), part.end());
  return out;
}

inline Bytes frame(FrameType type, std::uint16_t channel, ByteView payload) {
  Bytes out;
  amqp::append_frame(out, type, channel, payload);
  return out;
}

template <typename M>
Bytes method(std::uint16_t channel, const M& m) {
  Bytes out;
  EXPECT_TRUE(amqp::append_method_frame(out, channel, m));
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
  EXPECT_TRUE(amqp::append_content_header_frame(out, channel, h));
  return out;
}

inline Bytes body(std::uint16_t channel, std::string_view data) {
  return frame(FrameType::body, channel, amqp::as_bytes(data));
}

inline Bytes heartbeat() {
  Bytes out;
  amqp::append_heartbeat(out);
  return out;
}

// The connection.close the proxy sends the broker once a gone client's connection is done
// (session_crash.cpp): the broker's close-ok ends it.
inline Bytes gone_client_close() {
  amqp::ConnectionClose close;
  close.reply_code = 200;
  close.reply_text = "nackguard: the client connection ended";
  return method(0, close);
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

inline Bytes ack(std::uint16_t channel, std::uint64_t tag, bool multiple = false) {
  return method(channel, amqp::BasicAck{tag, multiple});
}
inline Bytes nack(std::uint16_t channel, std::uint64_t tag, bool multiple, bool requeue) {
  return method(channel, amqp::BasicNack{tag, multiple, requeue});
}
inline Bytes reject(std::uint16_t channel, std::uint64_t tag, bool requeue) {
  return method(channel, amqp::BasicReject{tag, requeue});
}

inline Bytes protocol_header() {
  return Bytes(std::begin(amqp::kProtocolHeader), std::end(amqp::kProtocolHeader));
}

// ---- reading what a session wrote ----

// Every frame of `bytes`; anything that is not a whole number of valid frames fails the test.
inline std::vector<WireFrame> decode_frames(ByteView bytes) {
  std::vector<WireFrame> frames;
  amqp::FrameDecoder decoder(1u << 30);
  while (!bytes.empty()) {
    amqp::FrameResult r = decoder.decode(bytes);
    if (r.status != amqp::FrameResult::Status::frame) {
      ADD_FAILURE() << "session output is not whole frames: " << bytes.size()
                    << " bytes left after " << frames.size() << " frames";
      break;
    }
    frames.push_back(WireFrame{r.frame.type, r.frame.channel,
                               Bytes(r.frame.payload.begin(), r.frame.payload.end())});
    bytes = bytes.subspan(r.frame.raw.size());
  }
  return frames;
}

// Expected frames, written as the bytes that encode them.
inline std::vector<WireFrame> frames(std::initializer_list<Bytes> parts) {
  return decode_frames(cat(parts));
}

// The payload of `frame` decoded as method M; a frame that is not M fails the test.
template <typename M>
M decode_as(const WireFrame& frame) {
  M m;
  EXPECT_TRUE(frame.is_method()) << frame;
  amqp::MethodError e = amqp::decode_method(frame.payload, m);
  EXPECT_EQ(e, amqp::MethodError::none) << amqp::to_string(e) << " in " << frame;
  return m;
}

// ---- a session with its observer ----

class Link {
 public:
  explicit Link(SessionOptions options = {}) : session(options, &observer) {}
  // A session that reports to `watcher` instead (`observer` then hears nothing).
  Link(SessionOptions options, SessionObserver& watcher) : session(options, &watcher) {}

  void client(ByteView bytes) { session.feed(Side::client, bytes); }
  void broker(ByteView bytes) { session.feed(Side::broker, bytes); }

  // Moves out what the session wrote towards a side.
  Bytes bytes_to(Side side) {
    Bytes out;
    out.swap(session.output(side));
    return out;
  }
  Bytes client_bytes() { return bytes_to(Side::client); }
  Bytes broker_bytes() { return bytes_to(Side::broker); }
  std::vector<WireFrame> to_client() { return decode_frames(client_bytes()); }
  std::vector<WireFrame> to_broker() { return decode_frames(broker_bytes()); }

  // A client that closes a channel or its connection, or leaves, has its consumers (channel,
  // tag) cancelled by the proxy, which holds the close until the cancel-oks
  // (session_crash.cpp): checks the cancels and answers them.
  void consumers_cancelled(const std::vector<std::pair<std::uint16_t, std::string>>& consumers) {
    Bytes cancels;
    Bytes oks;
    for (const auto& [ch, tag] : consumers) {
      cancels = cat({cancels, method(ch, amqp::BasicCancel{tag, false})});
      oks = cat({oks, method(ch, amqp::BasicCancelOk{tag})});
    }
    EXPECT_EQ(broker_bytes(), cancels);
    broker(oks);
  }

  RecordingObserver observer;
  Session session;
};

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

struct HandshakeResult {
  amqp::ConnectionTune client_saw;    // the tune the proxy wrote to the client
  amqp::ConnectionTuneOk broker_saw;  // the tune-ok the proxy wrote to the broker
};

// Runs protocol header, start, start-ok, tune, tune-ok, open and open-ok through `link`,
// checking that everything but the tune pair passes as its original bytes. Leaves the
// outputs empty.
inline HandshakeResult handshake(Link& link, const HandshakeParams& p = {}) {
  HandshakeResult result;
  HandshakeFrames f = handshake_frames(p, {});

  link.client(protocol_header());
  EXPECT_EQ(link.broker_bytes(), protocol_header());
  link.broker(f.start);
  EXPECT_EQ(link.client_bytes(), f.start);
  link.client(f.start_ok);
  EXPECT_EQ(link.broker_bytes(), f.start_ok);

  link.broker(f.tune);
  std::vector<WireFrame> tune = link.to_client();
  EXPECT_EQ(tune.size(), 1u);
  if (tune.size() == 1) result.client_saw = decode_as<amqp::ConnectionTune>(tune[0]);

  f = handshake_frames(p, result.client_saw);
  link.client(f.tune_ok);
  std::vector<WireFrame> tune_ok = link.to_broker();
  EXPECT_EQ(tune_ok.size(), 1u);
  if (tune_ok.size() == 1) result.broker_saw = decode_as<amqp::ConnectionTuneOk>(tune_ok[0]);

  link.client(f.open);
  EXPECT_EQ(link.broker_bytes(), f.open);
  link.broker(f.open_ok);
  EXPECT_EQ(link.client_bytes(), f.open_ok);
  EXPECT_TRUE(link.session.is_open());
  return result;
}

}  // namespace nackguard::session::test
