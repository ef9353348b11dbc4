#include "proxy/session/ack_timeout.hpp"

#include <charconv>
#include <string>

#include "proxy/amqp/constants.hpp"
#include "proxy/amqp/method_codec.hpp"

namespace nackguard::session {

namespace {

namespace mid = amqp::mid;

// RabbitMQ's text (rabbit_channel, 3.8 to 4.x): "PRECONDITION_FAILED - delivery
// acknowledgement on channel 1 timed out. Timeout value used: 1800000 ms. ..."
bool is_consumer_timeout(const amqp::ChannelClose& close) {
  const std::string_view text = close.reply_text;
  return close.reply_code == amqp::reply::precondition_failed &&
         text.find("delivery acknowledgement on channel") != std::string_view::npos &&
         text.find("timed out") != std::string_view::npos;
}

}  // namespace

void note_broker_channel_close(ChannelState& ch, const amqp::Frame& frame) {
  amqp::ChannelClose close;
  if (amqp::decode_method(frame.payload, close) != amqp::MethodError::none) return;
  if (!is_consumer_timeout(close)) return;
  ch.ack_timed_out = true;
  ch.timed_out_broker_tag = ch.broker_oldest_unsettled();
}

bool cancel_requeues(std::string_view version) {
  int major = 0;
  int minor = 0;
  auto [end, error] = std::from_chars(version.data(), version.data() + version.size(), major);
  if (error != std::errc()) return false;
  if (end != version.data() + version.size() && *end == '.') {
    std::from_chars(end + 1, version.data() + version.size(), minor);
  }
  return major > 4 || (major == 4 && minor >= 3);
}

ReturnCause end_cause(const ChannelState& ch, const Delivery& d, ReturnCause cause) {
  if (!ch.ack_timed_out) return cause;
  return d.broker_tag == ch.timed_out_broker_tag && !d.taken_over && !d.held_back
             ? ReturnCause::consumer_timeout
             : ReturnCause::broker_lost;
}

AckTimeoutClose ack_timeout_close(std::uint16_t number, const Delivery& d, std::int64_t held_ms,
                                  std::int64_t timeout_ms) {
  AckTimeoutClose frames;
  amqp::ChannelClose to_client;
  to_client.reply_code = amqp::reply::precondition_failed;
  to_client.reply_text = "PRECONDITION_FAILED - nackguard: delivery acknowledgement on channel " +
                         std::to_string(number) + " timed out: delivery tag " +
                         std::to_string(d.client_tag) + " from queue '" + d.queue +
                         "' unacked for " + std::to_string(held_ms) +
                         " ms, over its policy's ack_timeout of " + std::to_string(timeout_ms) +
                         " ms; its channel's deliveries are requeued";
  amqp::append_close_frame(frames.to_client, number, to_client);

  amqp::ChannelClose to_broker;
  to_broker.reply_code = amqp::reply::success;
  to_broker.reply_text = "nackguard: ack_timeout of a delivery on this channel";
  amqp::append_close_frame(frames.to_broker, number, to_broker);
  return frames;
}

CloseEnd close_end(const amqp::Frame& frame) {
  if (frame.frame_type() != amqp::FrameType::method) return CloseEnd::no;
  const std::optional<std::uint32_t> key = amqp::peek_method_key(frame.payload);
  if (key == mid::channel_close) return CloseEnd::crossed_close;
  return key == mid::channel_close_ok ? CloseEnd::close_ok : CloseEnd::no;
}

}  // namespace nackguard::session
