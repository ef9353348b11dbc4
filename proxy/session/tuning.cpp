#include "proxy/session/tuning.hpp"

#include <algorithm>
#include <limits>

#include "proxy/amqp/frame.hpp"

namespace nackguard::session {

amqp::ConnectionTune Tuning::offer(const amqp::ConnectionTune& broker) {
  amqp::ConnectionTune offered = broker;
  std::uint32_t broker_channel_max = broker.channel_max == 0 ? 65535 : broker.channel_max;
  // With a single channel there is none to spare; the proxy then reserves nothing.
  reserve_channel_ = broker_channel_max >= 2;
  if (reserve_channel_) offered.channel_max = static_cast<std::uint16_t>(broker_channel_max - 1);
  offered_channel_max_ = offered.channel_max;
  std::uint32_t broker_frame_max =
      broker.frame_max == 0 ? std::numeric_limits<std::uint32_t>::max() : broker.frame_max;
  offered.frame_max = std::min(broker_frame_max, max_frame_bytes_);
  offered_frame_max_ = offered.frame_max;
  return offered;
}

amqp::ConnectionTuneOk Tuning::answer(const amqp::ConnectionTuneOk& client) {
  amqp::ConnectionTuneOk to_broker = client;
  if (reserve_channel_) {
    std::uint16_t client_max = client.channel_max == 0
                                   ? offered_channel_max_
                                   : std::min(client.channel_max, offered_channel_max_);
    reserved_channel_ = static_cast<std::uint16_t>(client_max + 1);
    to_broker.channel_max = *reserved_channel_;
  }
  std::uint32_t frame_max =
      client.frame_max == 0 ? offered_frame_max_ : std::min(client.frame_max, offered_frame_max_);
  if (offered_frame_max_ != 0) to_broker.frame_max = frame_max;
  frame_max_ = std::max(to_broker.frame_max, amqp::kFrameMinSize);
  if (to_broker.frame_max == 0) frame_max_ = max_frame_bytes_;
  heartbeat_ = client.heartbeat;
  return to_broker;
}

}  // namespace nackguard::session
