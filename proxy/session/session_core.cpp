// The session's core (session_core.hpp): the two sides' bytes and injections, the channels'
// ends and their returns, and the take-overs carried out: their copies published on the proxy's
// channel, their outcomes handed back to the observer and the settlements it returns written.

#include "proxy/session/session_core.hpp"

#include <algorithm>

#include "proxy/amqp/method_codec.hpp"
#include "proxy/session/ack_timeout.hpp"
#include "proxy/session/send_ahead.hpp"

namespace nackguard::session {

using amqp::ByteView;

std::string_view to_string(Side side) {
  return side == Side::client ? "client" : "broker";
}

SessionCore::SessionCore(SessionOptions options, SessionObserver* observer)
    : options_(options),
      observer_(observer ? observer : &null_observer_),
      handshake_(options.max_frame_bytes),
      router_(*observer_, options_.body_budget, io(Side::client).out, clock_ms_) {
  // Before tune-ok the spec allows only frame-min-size; RabbitMQ's own handshake frames are
  // small, but clients with large property tables exist, so allow up to 128 KiB until then.
  std::uint32_t initial =
      std::clamp<std::uint32_t>(options_.max_frame_bytes, amqp::kFrameMinSize, 131072);
  for (auto& side : io_) side.decoder.set_frame_max(initial);
  io(Side::client).out.set_source(io(Side::broker).in);
  io(Side::broker).out.set_source(io(Side::client).in);
}

// ---- the bytes ----

std::span<std::uint8_t> SessionCore::input_space(Side from, std::size_t buffer_bytes) {
  finish_bookkeeping();                  // the frame it reads lies in an input buffer
  io(other(from)).out.copy_forwarded();  // the next read overwrites what it points to
  SideIo& side = io(from);
  return side.in.space(buffer_bytes, side.decoder.frame_max());
}

void SessionCore::receive(Side from, std::size_t n) {
  SideIo& side = io(from);
  side.in.commit(n);
  side.received = n;
}

// Frames the relay may write before the session handles them (receive_input): one
// whole first delivery, alone in a read from the broker, that handling is known to forward to
// the client as its original bytes, ahead of anything else.
//
// Why: its handling (the deliver's decode, the guard's plan, the record) took about 3.6 µs
// between the read and the send on the benchmark machine, on the added latency of every
// message that travels alone (docs/performance.md, "Sent ahead"). Written first, the
// delivery leaves once its frames are checked; the handling follows before the next read.
//
// Each condition below mirrors a place where handling could do otherwise than forward the
// frames unchanged and first: a close in progress, frames queued before them, a delivery whose
// client tag would differ from the broker's (hand_out patches the tag), deliveries held back
// behind a suspect (held_back), a delivery a guard could take over (not a first delivery, or
// an observer that does not forward first deliveries), a frame the decoder or the method
// codec refuses (then the connection is closed instead). Should handling still emit anything
// else first, Outbox::ahead_missed() says so and handle_input() closes the connection (541).
amqp::ByteView SessionCore::receive_input(Side from, std::size_t n) {
  const bool fresh = io(from).in.empty();  // no partial frame kept from the last read
  receive(from, n);
  if (from != Side::broker || !fresh || n == 0) return {};
  ByteView data = io(from).in.pending();
  return data.first(lone_first_delivery(data));
}

void SessionCore::written_ahead(Side to, std::size_t n) {
  if (n > 0) io(to).out.written_ahead(io(other(to)).in.pending().first(n));
}

std::size_t SessionCore::lone_first_delivery(ByteView data) {
  const SideIo& broker = io(Side::broker);
  const SideIo& client = io(Side::client);
  if (phase_ != Phase::open || proxy_close_ != ProxyClose::none || tx_replay_pending_ ||
      broker.input_closed || !client.out.empty() || client.out.closed() ||
      !client.injections.empty() || router_.any_held_back() || router_.has_deferred() ||
      !observer_->forwards_first_deliveries()) {
    return 0;
  }
  std::optional<LoneDelivery> lone = lone_delivery(broker.decoder, data, reserved_channel());
  if (!lone) return 0;
  const std::uint16_t number = lone->method.channel;
  auto it = channels_.find(number);
  if (it == channels_.end()) return 0;
  const ChannelState& ch = it->second;
  if (ch.ack_close.active || ch.closing || ch.held_close.held() || ch.incoming ||
      ch.from_broker.in_progress() || ch.gate.closed() || !ch.held_back.empty()) {
    return 0;
  }
  // Decoded as start_broker_delivery decodes it, into the same scratch: it decodes it again.
  // hand_out patches the tag unless the client's next tag is the broker's own.
  amqp::BasicDeliver& m = deliver_scratch_;
  if (amqp::decode_method(lone->method.payload, m) != amqp::MethodError::none || m.redelivered ||
      m.delivery_tag != ch.last_client_tag() + 1) {
    return 0;
  }
  return lone->size;
}

void SessionCore::inject(Side to, amqp::Bytes frames) {
  finish_bookkeeping();
  if (to == Side::broker && connection_hold_.gone_close_sent())
    return;  // after the connection.close
  io(to).injections.push_back(Injection{std::move(frames), 0, std::nullopt});
  flush_injections(to);
}

void SessionCore::flush_injections(Side to) {
  SideIo& out = io(to);
  if (to == Side::broker && !outcomes_.empty()) deliver_outcomes();
  if (out.injections.empty() || content_in_progress(to)) return;
  std::vector<Injection> ready = std::move(out.injections);
  out.injections.clear();
  for (std::size_t i = 0; i < ready.size(); ++i) {
    Injection& injection = ready[i];
    emit(to, injection.frames);
    if (injection.tx_commit) tx_commit_written(injection.channel);
    if (!injection.settles && !injection.tx_resend) continue;
    auto it = channels_.find(injection.channel);
    if (it == channels_.end()) continue;
    if (injection.settles) {
      it->second.remove_taken_over(injection.settles->broker_tag);
      release_held_close(it->second);
      release_crash_holds(false);
      // A gone client's connection ended, or its close went out: nothing may follow.
      if (phase_ == Phase::closed || connection_hold_.gone_close_sent()) return;
    }
    // In the client's transaction: dropped by a rollback, written again after it.
    if (it->second.tx.active) it->second.tx.proxy_settles.push_back(std::move(injection.frames));
  }
}

void SessionCore::drop_injections(std::uint16_t channel) {
  auto& queued = io(Side::broker).injections;
  const auto on_channel = [channel](const Injection& i) { return i.channel == channel; };
  std::erase_if(queued, on_channel);
}

void SessionCore::drop_all_injections(Side to) {
  io(to).injections.clear();
}

bool SessionCore::content_in_progress(Side to) const {
  for (const auto& [number, ch] : channels_) {
    const ContentState& state = to == Side::broker ? ch.from_client : ch.to_client;
    if (state.in_progress()) return true;
  }
  return false;
}

// ---- channels' ends and returns ----

void SessionCore::returned(const Delivery& delivery, ReturnCause cause, bool solo) {
  observer_->on_returned(delivery, cause, ReturnContext{.solo = solo, .can_take_over = false});
}

void SessionCore::return_all(ChannelState& ch, ReturnCause cause) {
  // A recover leaves the transaction's settlements alone: they are not among the unacked.
  if (cause != ReturnCause::recover) tx_return_all(ch, cause);
  const bool solo = ch.crash_tag == 0 && ch.in_hand_tags().size() == 1;
  for (const Delivery& d : ch.take_all()) {
    if (d.no_ack) continue;
    // The client's close or crash counted what it held then (session_core_end.cpp); what came
    // after, the client never saw.
    const bool after_crash = ch.crash_tag != 0 && !d.taken_over;
    if (after_crash && d.client_tag <= ch.crash_tag) continue;
    returned(d, after_crash ? ReturnCause::unseen : end_cause(ch, d, cause), solo);
  }
  std::deque<ChannelState::HeldBackDelivery> held_back = router_.take_held_back(ch);
  ch.gate.open();
  for (ChannelState::HeldBackDelivery& h : held_back) {
    if (!h.delivery.no_ack) returned(h.delivery, end_cause(ch, h.delivery, cause), false);
  }
  // A delivery cut off mid-body: the observer has seen it, and the broker requeues it.
  if (ch.incoming && !ch.incoming->header_payload.empty() && !ch.incoming->no_ack) {
    returned(*ch.incoming, end_cause(ch, *ch.incoming, cause), false);
  }
  ch.incoming.reset();
  observer_->on_returns_done();
}

void SessionCore::end_channel(std::uint16_t number, ReturnCause cause) {
  auto it = channels_.find(number);
  if (it == channels_.end()) return;
  return_all(it->second, cause);
  channels_.erase(it);
}

void SessionCore::end_all_channels(ReturnCause cause) {
  std::vector<std::uint16_t> numbers;
  numbers.reserve(channels_.size());
  for (const auto& [number, ch] : channels_) numbers.push_back(number);
  std::sort(numbers.begin(), numbers.end());
  for (std::uint16_t number : numbers) end_channel(number, cause);
}

void SessionCore::tx_return_all(ChannelState& ch, ReturnCause cause) {
  ChannelTx& tx = ch.tx;
  // Settlements the broker had not committed: it requeues those deliveries. A requeue it was
  // given is counted already (at the client's nack or reject).
  for (const ChannelTx::Settled& s : ch.tx_take_settled()) {
    if ((s.kind == SettleKind::ack || !s.requeue) && !s.delivery.no_ack) {
      returned(s.delivery, end_cause(ch, s.delivery, cause), false);
    }
  }
  tx.takeovers.clear();  // taken over: reported with the channel's other taken-over deliveries
}

// ---- take-overs carried out, and their settlements ----

Delivery* SessionCore::settleable(std::uint16_t channel, std::uint64_t broker_tag) {
  auto it = channels_.find(channel);
  if (it == channels_.end() || phase_ != Phase::open || proxy_close_ != ProxyClose::none ||
      it->second.ack_close.active || (it->second.closing && !it->second.held_close.held())) {
    return nullptr;
  }
  Delivery* d = it->second.find_taken_over(broker_tag);
  return d && !d->settling ? d : nullptr;
}

bool SessionCore::settle_taken_over(std::uint16_t channel, std::uint64_t broker_tag,
                                    SettleKind kind, bool requeue) {
  finish_bookkeeping();
  Delivery* d = settleable(channel, broker_tag);
  if (!d) return false;
  auto it = channels_.find(channel);
  d->settling = true;
  amqp::Bytes frame;
  append_settlement(frame, channel, kind, broker_tag, false, requeue);
  io(Side::broker)
      .injections.push_back(
          Injection{std::move(frame), channel, Settle{channel, broker_tag, kind, requeue}});
  tx_settlement_queued(it->second, channel, broker_tag);
  flush_injections(Side::broker);
  return true;
}

void SessionCore::carry_out(std::uint16_t channel, std::uint64_t broker_tag,
                            std::optional<TakeOver> take_over) {
  if (!take_over) {
    settle_taken_over(channel, broker_tag, SettleKind::nack, true);
    return;
  }
  auto it = channels_.find(channel);
  Delivery* d = it == channels_.end() ? nullptr : it->second.find_taken_over(broker_tag);
  if (d) d->take_over_job = static_cast<std::uint32_t>(take_over->ticket().job);
  if (take_over->copy) {
    proxy_channel_.publish(std::move(*take_over->copy), steady_ms());
  } else {
    outcomes_.push_back(std::move(take_over->at_once));
  }
  pump_proxy_channel();
}

void SessionCore::carry_out_router_take_overs() {
  if (!router_.has_take_overs()) return;
  for (DeliveryRouter::TakenOver& t : router_.take_take_overs()) {
    carry_out(t.channel, t.broker_tag, std::move(t.take_over));
  }
}

void SessionCore::pump_proxy_channel() {
  ProxyChannel::Output out = proxy_channel_.take_output();
  for (const QueueNotice& notice : out.notices) observer_->on_queue_notice(notice);
  for (Outcome& outcome : out.outcomes) outcomes_.push_back(std::move(outcome));
  // The settlements first (a confirm's acks before the declaration it let through): their
  // channels are the client's, unrelated to the proxy's.
  deliver_outcomes();
  if (!out.frames.empty()) inject(Side::broker, std::move(out.frames));
}

bool SessionCore::can_settle(const Ticket& t) {
  if (connection_hold_.gone_close_sent()) return false;
  const Delivery* d = settleable(t.channel, t.broker_tag);
  return d && d->take_over_job == static_cast<std::uint32_t>(t.job);
}

void SessionCore::deliver_outcomes() {
  if (outcomes_.empty() || delivering_outcomes_ || content_in_progress(Side::broker)) return;
  delivering_outcomes_ = true;
  std::vector<Outcome> ready = std::move(outcomes_);
  outcomes_.clear();
  for (const Outcome& outcome : ready) {
    // Not the proxy's any more (the broker took it back with its channel or connection, or a
    // recover): the broker requeues it, and a copy confirmed is a duplicate.
    if (!can_settle(outcome.ticket)) continue;
    const Settle s = observer_->on_outcome(outcome);
    // No content is in progress: written at once.
    settle_taken_over(s.channel, s.broker_tag, s.kind, s.requeue);
  }
  delivering_outcomes_ = false;
  if (!outcomes_.empty()) deliver_outcomes();
}

void SessionCore::tx_settlement_queued(ChannelState& ch, std::uint16_t channel,
                                       std::uint64_t broker_tag) {
  std::optional<amqp::Bytes> frame = ch.tx.settlement_queued(broker_tag);
  if (!frame) return;
  // Behind the settlements in the injection queue, so that the commit takes them in.
  Injection commit{std::move(*frame), channel, std::nullopt};
  commit.tx_commit = true;
  io(Side::broker).injections.push_back(std::move(commit));
}

void SessionCore::tx_commit_written(std::uint16_t channel) {
  auto it = channels_.find(channel);
  if (it == channels_.end()) return;
  it->second.tx.commit_written();
  tx_replay_pending_ = true;
}

bool SessionCore::hold_client_close(ChannelState& ch, const amqp::Frame& close) {
  const bool waits = ch.taken_over_count() > 0 || ch.cancels_pending > 0;
  if (!waits || ch.tx.active || ch.ack_close.active) return false;
  ch.held_close.hold(close.raw, clock_ms_);
  return true;
}

void SessionCore::release_held_close(ChannelState& ch, bool overdue) {
  const bool waits = ch.taken_over_count() > 0 || ch.cancels_pending > 0;
  if (!ch.held_close.held() || (waits && !overdue)) return;
  if (content_in_progress(Side::broker)) return;  // the next flush or tick sends it
  emit(Side::broker, ch.held_close.take());
}

void SessionCore::release_held_back(ChannelState& ch, bool even_with_others_in_hand) {
  if (content_in_progress(Side::client)) return;  // retried at the next frame boundary
  bool force = even_with_others_in_hand;
  while (router_.release_next(ch, force)) {
    force = false;
    carry_out_router_take_overs();
  }
}

void SessionCore::release_all_held_back() {
  for (auto& [number, ch] : channels_) {
    if (!ch.held_back.empty() && !ch.gate.closed()) release_held_back(ch);
  }
}

}  // namespace nackguard::session
