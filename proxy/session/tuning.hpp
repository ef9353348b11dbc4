#pragma once
// Connection tuning, the handshake's two rewrites. The broker's connection.tune is offered to
// the client with one channel fewer (the top one is the proxy's own) and frame_max capped; the
// client's tune-ok goes to the broker with the reserved channel counted back in. Pure: the
// session decodes and encodes the frames.

#include <cstdint>
#include <optional>

#include "proxy/amqp/methods.hpp"

namespace nackguard::session {

class Tuning {
 public:
  // `max_frame_bytes`: the largest frame_max the two sides may negotiate.
  explicit Tuning(std::uint32_t max_frame_bytes) : max_frame_bytes_(max_frame_bytes) {}

  // The broker's connection.tune, as the client is to see it.
  amqp::ConnectionTune offer(const amqp::ConnectionTune& broker);
  // The client's connection.tune-ok, as the broker is to see it.
  amqp::ConnectionTuneOk answer(const amqp::ConnectionTuneOk& client);

  // The channel the proxy keeps for itself, once tune-ok has been seen; none when the broker
  // allows a single channel.
  std::optional<std::uint16_t> reserved_channel() const { return reserved_channel_; }
  // The heartbeat the client asked for in tune-ok, in seconds.
  std::uint16_t heartbeat() const { return heartbeat_; }
  // The largest frame both sides may send once tune-ok is through.
  std::uint32_t frame_max() const { return frame_max_; }

 private:
  std::uint32_t max_frame_bytes_;
  bool reserve_channel_ = false;
  std::uint16_t offered_channel_max_ = 0;  // to the client; 0 until the broker's tune
  std::uint32_t offered_frame_max_ = 0;
  std::optional<std::uint16_t> reserved_channel_;
  std::uint16_t heartbeat_ = 0;
  std::uint32_t frame_max_ = 0;
};

}  // namespace nackguard::session
