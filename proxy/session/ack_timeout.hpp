#pragma once
// The rules of acknowledgement timeouts, as values (the session applies them:
// ack_closes.cpp). RabbitMQ's consumer_timeout (30 min by default; per queue from 3.12
// with x-consumer-timeout or a policy) closes the channel with 406 "delivery acknowledgement
// on channel N timed out" once the oldest unacked delivery on it has waited that long, and
// requeues every delivery of the channel; RabbitMQ 4.3 times out a quorum queue's consumer
// with a basic.cancel instead (the channel stays open). Either way only the delivery that
// timed out is the consumer's doing: it counts a return (consumer_timeout), the others count
// nothing. The policy's ack_timeout has the proxy close the channel itself, on both sides.

#include <cstdint>
#include <string_view>

#include "proxy/amqp/bytes.hpp"
#include "proxy/amqp/frame.hpp"
#include "proxy/session/channel.hpp"
#include "proxy/session/delivery.hpp"

namespace nackguard::session {

// The broker's channel.close on `ch`: if it is RabbitMQ's consumer_timeout, the broker's oldest
// unsettled delivery is the one that timed out (ChannelState::timed_out_broker_tag).
void note_broker_channel_close(ChannelState& ch, const amqp::Frame& close);

// Whether the broker (its "version" server property) requeues a consumer's deliveries when it
// cancels it for a consumer timeout: RabbitMQ 4.3 and later.
bool cancel_requeues(std::string_view broker_version);

// Why `d` goes back to the broker when `ch` ends for `cause`: the delivery whose ack timed out
// is a consumer_timeout return, the others are no consumer's doing (broker_lost).
ReturnCause end_cause(const ChannelState& ch, const Delivery& d, ReturnCause cause);

// The two channel.close frames of the proxy's own close of channel `number`, whose delivery
// `d` stayed unacked `held_ms`, past its policy's `timeout_ms`: 406 to the client, naming the
// delivery; 200 to the broker, which then requeues the channel's deliveries.
struct AckTimeoutClose {
  amqp::Bytes to_client;
  amqp::Bytes to_broker;
};
AckTimeoutClose ack_timeout_close(std::uint16_t number, const Delivery& d, std::int64_t held_ms,
                                  std::int64_t timeout_ms);

// A frame from one side on a channel the proxy is closing: whether it ends that side's part.
enum class CloseEnd {
  no,            // anything else: dropped, as the spec has the side that sent a close do
  close_ok,      // its close-ok of the proxy's close
  crossed_close  // its own channel.close, sent before it read the proxy's: answer a close-ok
};
CloseEnd close_end(const amqp::Frame& frame);

}  // namespace nackguard::session
