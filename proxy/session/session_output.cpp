#include "proxy/session/session.hpp"

#include <cstdint>

// What the session queues towards each side besides the frames it forwards (outbox.hpp):
// injections that wait for a frame boundary; and the take-overs the observer decided, carried
// out: their copies published on the proxy's channel, their outcomes handed back to the
// observer and the settlements it returns written.

namespace nackguard::session {

void Session::inject(Side to, amqp::Bytes frames) {
  finish_bookkeeping();
  if (to == Side::broker && connection_hold_.gone_close_sent()) return;  // after the connection.close
  io(to).injections.push_back(Injection{std::move(frames), 0, std::nullopt});
  flush_injections(to);
}

void Session::carry_out(std::uint16_t channel, std::uint64_t broker_tag,
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

void Session::carry_out_router_take_overs() {
  if (!router_.has_take_overs()) return;
  for (DeliveryRouter::TakenOver& t : router_.take_take_overs()) {
    carry_out(t.channel, t.broker_tag, std::move(t.take_over));
  }
}

void Session::pump_proxy_channel() {
  ProxyChannel::Output out = proxy_channel_.take_output();
  for (const QueueNotice& notice : out.notices) observer_->on_queue_notice(notice);
  for (Outcome& outcome : out.outcomes) outcomes_.push_back(std::move(outcome));
  // The settlements first (a confirm's acks before the declaration it let through): their
  // channels are the client's, unrelated to the proxy's.
  deliver_outcomes();
  if (!out.frames.empty()) inject(Side::broker, std::move(out.frames));
}

bool Session::can_settle(const Ticket& t) {
  if (connection_hold_.gone_close_sent()) return false;
  const Delivery* d = settleable(t.channel, t.broker_tag);
  return d && d->take_over_job == static_cast<std::uint32_t>(t.job);
}

void Session::deliver_outcomes() {
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

void Session::flush_injections(Side to) {
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

void Session::drop_injections(std::uint16_t channel) {
  auto& queued = io(Side::broker).injections;
  const auto on_channel = [channel](const Injection& i) { return i.channel == channel; };
  std::erase_if(queued, on_channel);
}

void Session::drop_all_injections(Side to) {
  io(to).injections.clear();
}

bool Session::hold_client_close(ChannelState& ch, const amqp::Frame& close) {
  const bool waits = ch.taken_over_count() > 0 || ch.cancels_pending > 0;
  if (!waits || ch.tx.active || ch.ack_close.active) return false;
  ch.held_close.hold(close.raw, clock_ms_);
  return true;
}

void Session::release_held_close(ChannelState& ch, bool overdue) {
  const bool waits = ch.taken_over_count() > 0 || ch.cancels_pending > 0;
  if (!ch.held_close.held() || (waits && !overdue)) return;
  if (content_in_progress(Side::broker)) return;  // the next flush or tick sends it
  emit(Side::broker, ch.held_close.take());
}

bool Session::content_in_progress(Side to) const {
  for (const auto& [number, ch] : channels_) {
    const ContentState& state = to == Side::broker ? ch.from_client : ch.to_client;
    if (state.in_progress()) return true;
  }
  return false;
}

}  // namespace nackguard::session
