// The acknowledgement timeouts applied (ack_closes.hpp).

#include "proxy/session/ack_closes.hpp"

#include <algorithm>
#include <string>

#include "proxy/amqp/method_codec.hpp"
#include "proxy/session/ack_timeout.hpp"

namespace nackguard::session {

bool AckCloses::note_broker_cancel(ChannelState& ch, const amqp::Frame& frame) {
  // A broker-sent cancel: the consumer tag, then the no-wait bit.
  amqp::ByteReader in(frame.payload.subspan(4));
  const std::string tag = in.shortstr();
  if (!in.ok()) return false;
  if (cancel_requeues(core_.handshake_.broker_version())) {
    // RabbitMQ 4.3 times out a quorum queue's consumer this way (earlier versions close the
    // channel: note_broker_channel_close), and requeues what it held: the broker's oldest is
    // the delivery that timed out. Any other reason (the queue deleted) leaves nothing to count.
    std::vector<Delivery> requeued = ch.requeued_by_broker(tag);
    for (std::size_t i = 0; i < requeued.size(); ++i) {
      const ReturnCause cause = i == 0 ? ReturnCause::consumer_timeout : ReturnCause::broker_lost;
      core_.observer_->on_returned(requeued[i], cause, ReturnContext{.solo = i == 0});
    }
    if (!requeued.empty()) core_.observer_->on_returns_done();
  }
  ch.book.forget(tag);
  return true;
}

void AckCloses::check(std::int64_t now_ms) {
  std::vector<std::uint16_t> numbers;
  for (auto& [number, ch] : core_.channels_) {
    if (core_.clock_ms_ < 0) ch.stamp_handed_out(now_ms);
    if (ch.closing || ch.ack_close.active) continue;
    const Delivery* d = ch.oldest_unacked();
    if (d == nullptr || d->handed_out_ms < 0) continue;
    const std::int64_t timeout = core_.observer_->ack_timeout_ms(*d);
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
    ChannelState& ch = core_.channels_.at(number);
    const Delivery* d = ch.oldest_unacked();
    const std::int64_t timeout = core_.observer_->ack_timeout_ms(*d);
    start(number, ch, *d, now_ms - d->handed_out_ms, timeout);
  }
}

void AckCloses::start(std::uint16_t number, ChannelState& ch, const Delivery& d,
                      std::int64_t held_ms, std::int64_t timeout_ms) {
  ch.closing = true;
  ch.ack_close.active = true;
  ch.ack_timed_out = true;
  ch.timed_out_broker_tag = d.broker_tag;
  core_.observer_->on_ack_timeout(d, held_ms);
  core_.drop_injections(number);  // settlements of taken-over deliveries: the broker requeues them

  AckTimeoutClose frames = ack_timeout_close(number, d, held_ms, timeout_ms);
  core_.inject(Side::client, std::move(frames.to_client));
  core_.inject(Side::broker, std::move(frames.to_broker));
}

std::optional<ChannelState::AckClose> AckCloses::client_frame(ChannelState& ch,
                                                              const amqp::Frame& frame) {
  ChannelState::AckClose& close = ch.ack_close;
  if (close.client_done) {
    // Frames for the channel's next life: they wait for the broker's close-ok.
    auto reservation = core_.reserve_kept_frame(frame, "the broker closed it");
    if (reservation) close.keep(frame.raw, std::move(reservation));
    return std::nullopt;
  }
  if (!ends_close(Side::client, frame)) return std::nullopt;
  close.client_done = true;
  if (!close.broker_done) return std::nullopt;
  return finish(frame.channel);
}

std::optional<ChannelState::AckClose> AckCloses::broker_frame(ChannelState& ch,
                                                              const amqp::Frame& frame) {
  if (!ends_close(Side::broker, frame)) return std::nullopt;
  ch.ack_close.broker_done = true;
  if (!ch.ack_close.client_done) return std::nullopt;
  return finish(frame.channel);
}

bool AckCloses::ends_close(Side from, const amqp::Frame& frame) {
  const CloseEnd end = close_end(frame);
  if (end != CloseEnd::crossed_close) return end == CloseEnd::close_ok;
  // That side closed too, before it read the proxy's close: it waits for a close-ok. The
  // broker (its own consumer_timeout, say) then sends none for the proxy's close; the client
  // may still send one, which is dropped (stray_close_oks_).
  amqp::Bytes ok;
  amqp::append_fixed_method_frame(ok, frame.channel, amqp::ChannelCloseOk{});
  core_.inject(from, std::move(ok));
  if (from == Side::client) stray_close_oks_.push_back(frame.channel);
  return true;
}

bool AckCloses::take_stray_close_ok(const amqp::Frame& frame) {
  auto it = std::find(stray_close_oks_.begin(), stray_close_oks_.end(), frame.channel);
  if (it == stray_close_oks_.end()) return false;
  stray_close_oks_.erase(it);
  return close_end(frame) == CloseEnd::close_ok;
}

ChannelState::AckClose AckCloses::finish(std::uint16_t number) {
  ChannelState::AckClose ended = std::move(core_.channels_.at(number).ack_close);
  core_.end_channel(number, ReturnCause::channel_closed);
  core_.flush_injections(Side::broker);
  return ended;
}

}  // namespace nackguard::session
