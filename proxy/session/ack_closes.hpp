#pragma once
// Acknowledgement timeouts, applied (their rules: ack_timeout.hpp): the broker's, by a consumer
// cancel (a channel close is noted with the channel's methods); the policy's ack_timeout, by the
// proxy's own close of the channel.
//
// The proxy's close: the client gets channel.close 406 naming the delivery, the broker a
// channel.close of its own (so it requeues every delivery of the channel, as its
// consumer_timeout would). Until both close-oks are in, frames on the channel are dropped, as the
// spec has the side that sent a close do; the client's frames after its close-ok (a channel.open
// of the same number) wait for the broker's. Then the channel ends: only the timed-out delivery
// counts a return. Works on the session's core; the Session replays the frames that waited.

#include <cstdint>
#include <optional>
#include <vector>

#include "proxy/amqp/frame.hpp"
#include "proxy/session/session_core.hpp"

namespace nackguard::session {

class AckCloses {
 public:
  explicit AckCloses(SessionCore& core) : core_(core) {}

  // The broker cancels a consumer of `ch` (basic.cancel): from RabbitMQ 4.3 on, a quorum
  // queue's consumer timeout, which requeues what the consumer held. Its oldest delivery is a
  // consumer_timeout return, the others are no consumer's doing. False if malformed.
  bool note_broker_cancel(ChannelState& ch, const amqp::Frame& frame);
  // The policy's ack_timeout: closes, on both sides, each channel whose oldest unacked
  // delivery was handed out longer ago than its timeout allows.
  void check(std::int64_t now_ms);
  // A frame from the client, or the broker, on a channel the proxy is closing
  // (ChannelState::ack_close). When it completes the close, the channel has ended and its
  // close comes back: the client frames it kept (AckClose::queued) are the caller's to handle.
  std::optional<ChannelState::AckClose> client_frame(ChannelState& ch, const amqp::Frame& frame);
  std::optional<ChannelState::AckClose> broker_frame(ChannelState& ch, const amqp::Frame& frame);
  // A client close-ok on a channel whose client closed while the proxy's close crossed it:
  // dropped (true). Any other frame on it means none is coming.
  bool take_stray_close_ok(const amqp::Frame& frame);
  bool awaits_stray_close_ok() const { return !stray_close_oks_.empty(); }

 private:
  void start(std::uint16_t number, ChannelState& ch, const Delivery& d, std::int64_t held_ms,
             std::int64_t timeout_ms);
  // True if `frame` ends `from`'s part of the close: its close-ok or its own close (answered
  // with a close-ok).
  bool ends_close(Side from, const amqp::Frame& frame);
  ChannelState::AckClose finish(std::uint16_t number);

  SessionCore& core_;
  // Channels on which the client closed while the proxy's ack-timeout close crossed it: the
  // client's close-ok for the proxy's close is still to come, and is not forwarded.
  std::vector<std::uint16_t> stray_close_oks_;
};

}  // namespace nackguard::session
