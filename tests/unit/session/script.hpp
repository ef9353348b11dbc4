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
#include "session/frame_builders.hpp"
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
  // (session_core_end.cpp): checks the cancels and answers them.
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

struct HandshakeResult {
  amqp::ConnectionTune client_saw;    // the tune the proxy wrote to the client
  amqp::ConnectionTuneOk broker_saw;  // the tune-ok the proxy wrote to the broker
};

// How far begin_handshake goes.
enum class HandshakeStep { start, start_ok, tune };

// Runs the handshake's first frames through `link`, up to and including `last`: protocol
// header, start, start-ok, then the broker's tune. The first three are checked to pass as their
// original bytes; the tune, which the proxy may rewrite, is only read. Leaves the outputs empty
// and returns the frames of `p` (the tune-ok taking what the broker offered).
inline HandshakeFrames begin_handshake(Link& link, HandshakeStep last,
                                       const HandshakeParams& p = {}) {
  HandshakeFrames f = handshake_frames(p, {});
  link.client(protocol_header());
  EXPECT_EQ(link.broker_bytes(), protocol_header());
  link.broker(f.start);
  EXPECT_EQ(link.client_bytes(), f.start);
  if (last == HandshakeStep::start) return f;
  link.client(f.start_ok);
  EXPECT_EQ(link.broker_bytes(), f.start_ok);
  if (last == HandshakeStep::start_ok) return f;
  link.broker(f.tune);
  link.client_bytes();
  return f;
}

// Runs protocol header, start, start-ok, tune, tune-ok, open and open-ok through `link`,
// checking that everything but the tune pair passes as its original bytes. Leaves the
// outputs empty.
inline HandshakeResult handshake(Link& link, const HandshakeParams& p = {}) {
  HandshakeResult result;
  HandshakeFrames f = begin_handshake(link, HandshakeStep::start_ok, p);

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
