#pragma once
// The client side of AMQP 0-9-1 without I/O, for `nackguard replay`: the connection handshake
// as a state machine (frames in, bytes to send out), reassembly of content frames into whole
// messages, and the frames of a publish. The blocking client in amqp_client.hpp carries bytes
// between these and a socket; everything here is tested without one.

#include <cstdint>
#include <optional>
#include <string>

#include "proxy/amqp/frame.hpp"
#include "proxy/amqp/methods.hpp"
#include "proxy/amqp/properties.hpp"

namespace nackguard::replay {

inline constexpr std::uint32_t kWantedFrameMax = 131072;
inline constexpr std::uint16_t kWantedHeartbeat = 60;
// The client uses channel 1 only.
inline constexpr std::uint16_t kChannel = 1;
// RabbitMQ refuses messages above 512 MiB (max_message_size's ceiling); a larger body_size
// announced by a peer is refused before anything is allocated for it.
inline constexpr std::uint64_t kMaxBodyBytes = 512ull << 20;

struct HandshakeParams {
  std::string user;
  std::string password;  // sent in connection.start-ok only; never in a message
  std::string vhost = "/";
  std::string endpoint;                            // "host:port", for messages
  std::uint16_t max_heartbeat = kWantedHeartbeat;  // 0 turns heartbeats off
  std::uint32_t max_frame = kWantedFrameMax;
  std::string version;  // reported in the client properties
};

// What connection.tune and our tune-ok settled.
struct Tuning {
  std::uint16_t channel_max = 0;
  std::uint32_t frame_max = amqp::kFrameMinSize;
  std::uint16_t heartbeat = 0;  // seconds; 0 = off
};

class Handshake {
 public:
  enum class State { awaiting_start, awaiting_tune, awaiting_open_ok, done, failed };

  explicit Handshake(HandshakeParams params) : params_(std::move(params)) {}

  // The protocol header, sent first.
  void begin(amqp::Bytes& out) const;
  // One frame from the broker; appends what to send in reply to `out`. Afterwards state() says
  // whether the connection is open, or failed and why (error(), one line for a person).
  void on_frame(const amqp::Frame& frame, amqp::Bytes& out);

  State state() const { return state_; }
  const std::string& error() const { return error_; }
  // The broker's reply code when it closed the connection (403 for a refused login).
  std::optional<std::uint16_t> close_code() const { return close_code_; }
  const Tuning& tuning() const { return tuning_; }

  // SASL PLAIN's response: "\0user\0password".
  static std::string plain_response(const std::string& user, const std::string& password);
  // Our side of connection.tune, honouring the broker's limits (0 = no limit, or off).
  static Tuning negotiate(const amqp::ConnectionTune& offer, std::uint16_t max_heartbeat,
                          std::uint32_t max_frame);

 private:
  void on_start(const amqp::Frame& frame, amqp::Bytes& out);
  void on_tune(const amqp::Frame& frame, amqp::Bytes& out);
  void on_close(const amqp::Frame& frame, amqp::Bytes& out);
  void fail(std::string why);

  HandshakeParams params_;
  State state_ = State::awaiting_start;
  std::string error_;
  std::optional<std::uint16_t> close_code_;
  Tuning tuning_;
};

// One unit the broker sent: a method, a whole message (method, header and body), or a heartbeat.
struct Inbound {
  enum class Kind { method, content, heartbeat };
  Kind kind = Kind::method;
  std::uint16_t channel = 0;
  std::uint32_t method_key = 0;
  amqp::Bytes method;  // the method frame's payload (class and method ids included)
  amqp::ContentHeader header;
  amqp::Bytes body;
};

// Turns frames into Inbound units. A content-carrying method (basic.get-ok, basic.return,
// basic.deliver) is held until its header and all its body frames have arrived.
class InboundAssembler {
 public:
  struct Result {
    std::optional<Inbound> unit;  // empty while a message is incomplete, or on error
    std::string error;            // set when the frames are out of order or malformed
  };
  Result on_frame(const amqp::Frame& frame);

 private:
  Result on_content_frame(const amqp::Frame& frame);

  std::optional<Inbound> pending_;
  bool have_header_ = false;
};

// Appends basic.publish, its content header (with body_size set from `body`) and the body cut
// into frames that fit `frame_max`. False if a name or property does not fit its length
// prefix; `out` is then as it was.
[[nodiscard]] bool append_publish(amqp::Bytes& out, std::uint16_t channel,
                                  const amqp::BasicPublish& method, amqp::ContentHeader header,
                                  amqp::ByteView body, std::uint32_t frame_max);

// A method's ids as "class.method", e.g. "60.71" for basic.get-ok.
std::string describe_method(std::uint32_t key);

// "404 NOT_FOUND - no queue 'q' in vhost '/'": a reply code and the broker's own text.
std::string describe_reply(std::uint16_t code, const std::string& text);

}  // namespace nackguard::replay
