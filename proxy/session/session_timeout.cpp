// Deliveries whose acknowledgement timed out. RabbitMQ's consumer_timeout (30 min by default;
// per queue from 3.12 with x-consumer-timeout or a policy) closes the channel with 406
// "delivery acknowledgement on channel N timed out" once the oldest unacked delivery on it has
// waited that long, and requeues every delivery of the channel. Only that delivery is the
// consumer's doing: it counts a return (consumer_timeout), the others count nothing. RabbitMQ
// 4.3 times out only quorum queues' consumers, with a basic.cancel of the consumer (the
// channel stays open) that requeues what it held: the same count (note_broker_cancel).

#include <algorithm>
#include <charconv>
#include <string>
#include <string_view>

#include "proxy/amqp/constants.hpp"
#include "proxy/amqp/method_codec.hpp"
#include "proxy/session/session.hpp"

namespace nackguard::session {

namespace {

namespace mid = amqp::mid;
constexpr std::uint16_t kPreconditionFailed = amqp::reply::precondition_failed;

// RabbitMQ's text (rabbit_channel, 3.8 to 4.x): "PRECONDITION_FAILED - delivery
// acknowledgement on channel 1 timed out. Timeout value used: 1800000 ms. ..."
bool is_consumer_timeout(const amqp::ChannelClose& close) {
  const std::string_view text = close.reply_text;
  return close.reply_code == kPreconditionFailed &&
         text.find("delivery acknowledgement on channel") != std::string_view::npos &&
         text.find("timed out") != std::string_view::npos;
}

// Whether the broker (its "version" server property) requeues a consumer's deliveries when it
// cancels it for a consumer timeout: RabbitMQ 4.3 and later.
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

}  // namespace

void Session::note_broker_channel_close(ChannelState& ch, const amqp::Frame& frame) {
  amqp::ChannelClose close;
  if (amqp::decode_method(frame.payload, close) != amqp::MethodError::none) return;
  if (!is_consumer_timeout(close)) return;
  ch.ack_timed_out = true;
  ch.timed_out_broker_tag = ch.broker_oldest_unsettled();
}

bool Session::note_broker_cancel(ChannelState& ch, const amqp::Frame& frame) {
  // A broker-sent cancel: the consumer tag, then the no-wait bit.
  amqp::ByteReader in(frame.payload.subspan(4));
  const std::string tag = in.shortstr();
  if (!in.ok()) return false;
  if (cancel_requeues(broker_version_)) {
    // RabbitMQ 4.3 times out a quorum queue's consumer this way (earlier versions close the
    // channel: note_broker_channel_close), and requeues what it held: the broker's oldest is
    // the delivery that timed out. Any other reason (the queue deleted) leaves nothing to count.
    std::vector<Delivery> requeued = ch.requeued_by_broker(tag);
    for (std::size_t i = 0; i < requeued.size(); ++i) {
      const ReturnCause cause = i == 0 ? ReturnCause::consumer_timeout : ReturnCause::broker_lost;
      observer_->on_returned(requeued[i], cause, ReturnContext{.solo = i == 0});
    }
    if (!requeued.empty()) observer_->on_returns_done();
  }
  ch.forget_consumer(tag);
  return true;
}

ReturnCause Session::end_cause(const ChannelState& ch, const Delivery& d, ReturnCause cause) {
  if (!ch.ack_timed_out) return cause;
  return d.broker_tag == ch.timed_out_broker_tag && !d.taken_over && !d.held_back
             ? ReturnCause::consumer_timeout
             : ReturnCause::broker_lost;
}

// ---- the policy's ack_timeout: the proxy closes the channel itself ----
//
// The client gets channel.close 406 naming the delivery, the broker a channel.close of its own
// (so it requeues every delivery of the channel, as its consumer_timeout would). Until both
// close-oks are in, frames on the channel are dropped, as the spec has the side that sent a
// close do; the client's frames after its close-ok (a channel.open of the same number) wait
// for the broker's. Then the channel ends: only the timed-out delivery counts a return.

void Session::check_ack_timeouts(std::int64_t now_ms) {
  std::vector<std::uint16_t> numbers;
  for (auto& [number, ch] : channels_) {
    if (clock_ms_ < 0) ch.stamp_handed_out(now_ms);
    if (ch.closing || ch.ack_close.active) continue;
    const Delivery* d = ch.oldest_unacked();
    if (d == nullptr || d->handed_out_ms < 0) continue;
    const std::int64_t timeout = observer_->ack_timeout_ms(*d);
    if (timeout <= 0 || now_ms - d->handed_out_ms < timeout) continue;
    // Not inside a content sequence on the channel, nor behind a commit the proxy holds: the
    // close can then be written at once, and nothing half-sent is left behind. Nor while the
    // proxy owns a delivery on it (a copy waits for its confirm): the broker would requeue the
    // original, and the copy, once confirmed, would be a duplicate.
    if (ch.from_client.in_progress() || ch.to_client.in_progress() ||
        ch.from_broker.in_progress() || ch.incoming || ch.tx.holds_commit() ||
        ch.taken_over_count() > 0) {
      continue;
    }
    numbers.push_back(number);
  }
  std::sort(numbers.begin(), numbers.end());
  for (std::uint16_t number : numbers) {
    ChannelState& ch = channels_.at(number);
    const Delivery* d = ch.oldest_unacked();
    const std::int64_t timeout = observer_->ack_timeout_ms(*d);
    start_ack_close(number, ch, *d, now_ms - d->handed_out_ms, timeout);
  }
}

void Session::start_ack_close(std::uint16_t number, ChannelState& ch, const Delivery& d,
                              std::int64_t held_ms, std::int64_t timeout_ms) {
  ch.closing = true;
  ch.ack_close.active = true;
  ch.ack_timed_out = true;
  ch.timed_out_broker_tag = d.broker_tag;
  observer_->on_ack_timeout(d, held_ms);
  drop_injections(number);  // settlements of taken-over deliveries: the broker requeues them

  amqp::ChannelClose to_client;
  to_client.reply_code = kPreconditionFailed;
  to_client.reply_text = "PRECONDITION_FAILED - nackguard: delivery acknowledgement on channel " +
                         std::to_string(number) + " timed out: delivery tag " +
                         std::to_string(d.client_tag) + " from queue '" + d.queue +
                         "' unacked for " + std::to_string(held_ms) +
                         " ms, over its policy's ack_timeout of " + std::to_string(timeout_ms) +
                         " ms; its channel's deliveries are requeued";
  amqp::Bytes frame;
  amqp::append_close_frame(frame, number, to_client);
  inject(Side::client, std::move(frame));

  amqp::ChannelClose to_broker;
  to_broker.reply_code = amqp::reply::success;
  to_broker.reply_text = "nackguard: ack_timeout of a delivery on this channel";
  amqp::Bytes broker_frame;
  amqp::append_close_frame(broker_frame, number, to_broker);
  inject(Side::broker, std::move(broker_frame));
}

void Session::client_frame_while_ack_close(ChannelState& ch, const amqp::Frame& frame) {
  ChannelState::AckClose& close = ch.ack_close;
  if (close.client_done) {
    // Frames for the channel's next life: they wait for the broker's close-ok.
    keep_client_frame(frame, close.queued, close.reservations, "the broker closed it");
    return;
  }
  if (!ends_close(Side::client, frame)) return;
  close.client_done = true;
  if (close.broker_done) finish_ack_close(frame.channel);
}

bool Session::ends_close(Side from, const amqp::Frame& frame) {
  if (frame.frame_type() != amqp::FrameType::method) return false;
  std::optional<std::uint32_t> key = amqp::peek_method_key(frame.payload);
  if (key != mid::channel_close) return key == mid::channel_close_ok;
  // That side closed too, before it read the proxy's close: it waits for a close-ok. The
  // broker (its own consumer_timeout, say) then sends none for the proxy's close; the client
  // may still send one, which is dropped (stray_close_oks_).
  amqp::Bytes ok;
  amqp::append_fixed_method_frame(ok, frame.channel, amqp::ChannelCloseOk{});
  inject(from, std::move(ok));
  if (from == Side::client) stray_close_oks_.push_back(frame.channel);
  return true;
}

void Session::broker_frame_while_ack_close(ChannelState& ch, const amqp::Frame& frame) {
  if (!ends_close(Side::broker, frame)) return;
  ch.ack_close.broker_done = true;
  if (ch.ack_close.client_done) finish_ack_close(frame.channel);
}

bool Session::take_stray_close_ok(const amqp::Frame& frame) {
  auto it = std::find(stray_close_oks_.begin(), stray_close_oks_.end(), frame.channel);
  if (it == stray_close_oks_.end()) return false;
  stray_close_oks_.erase(it);
  return frame.frame_type() == amqp::FrameType::method &&
         amqp::peek_method_key(frame.payload) == mid::channel_close_ok;
}

void Session::finish_ack_close(std::uint16_t number) {
  auto it = channels_.find(number);
  if (it == channels_.end()) return;
  amqp::Bytes queued = std::move(it->second.ack_close.queued);
  auto reservations = std::move(it->second.ack_close.reservations);
  end_channel(number, ReturnCause::channel_closed);
  flush_injections(Side::broker);
  replay_client_frames(queued);
}

}  // namespace nackguard::session
