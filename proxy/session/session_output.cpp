#include "proxy/session/session.hpp"

#include <cstdint>

// What the session queues towards each side besides the frames it forwards (outbox.hpp):
// injections that wait for a frame boundary, and the observer's actions.

namespace nackguard::session {

void Session::inject(Side to, amqp::Bytes frames) {
  finish_bookkeeping();
  if (to == Side::broker && gone_close_sent_) return;  // after the connection.close
  io(to).injections.push_back(Injection{std::move(frames), 0, std::nullopt});
  flush_injections(to);
}

void Session::apply(ObserverActions actions) {
  for (ObserverAction& action : actions) {
    if (action.kind == ObserverAction::Kind::send) {
      inject(Side::broker, std::move(action.frames));
      continue;
    }
    // Queued: the observer hears when it is written or dropped (flush_injections,
    // drop_injections).
    const Settle& s = action.settle;
    if (!settle_taken_over(s.channel, s.broker_tag, s.kind, s.requeue)) {
      observer_->on_settle_written(s, false);
    }
  }
}

void Session::flush_injections(Side to) {
  SideIo& out = io(to);
  if (out.injections.empty() || content_in_progress(to)) return;
  std::vector<Injection> ready = std::move(out.injections);
  out.injections.clear();
  for (std::size_t i = 0; i < ready.size(); ++i) {
    Injection& injection = ready[i];
    emit(to, injection.frames);
    if (injection.tx_commit) tx_commit_written(injection.channel);
    if (injection.settles) observer_->on_settle_written(*injection.settles, true);
    if (!injection.settles && !injection.tx_resend) continue;
    auto it = channels_.find(injection.channel);
    if (it == channels_.end()) continue;
    if (injection.settles) {
      it->second.remove_taken_over(injection.settles->broker_tag);
      release_held_close(it->second);
      release_crash_holds(false);
      // A gone client's connection ended, or its close went out: nothing may follow.
      if (phase_ == Phase::closed || gone_close_sent_) {
        report_unwritten(ready, i + 1);
        return;
      }
    }
    // In the client's transaction: dropped by a rollback, written again after it.
    if (it->second.tx.active) it->second.tx.proxy_settles.push_back(std::move(injection.frames));
  }
}

void Session::drop_injections(std::uint16_t channel) {
  auto& queued = io(Side::broker).injections;
  const auto on_channel = [channel](const Injection& i) { return i.channel == channel; };
  std::vector<Injection> dropped;
  for (Injection& injection : queued) {
    if (on_channel(injection)) dropped.push_back(std::move(injection));
  }
  std::erase_if(queued, on_channel);
  report_unwritten(dropped);
}

void Session::drop_all_injections(Side to) {
  std::vector<Injection> dropped = std::move(io(to).injections);
  io(to).injections.clear();
  report_unwritten(dropped);
}

void Session::report_unwritten(const std::vector<Injection>& dropped, std::size_t from) {
  for (std::size_t i = from; i < dropped.size(); ++i) {
    if (dropped[i].settles) observer_->on_settle_written(*dropped[i].settles, false);
  }
}

bool Session::hold_client_close(ChannelState& ch, const amqp::Frame& close) {
  const bool waits = ch.taken_over_count() > 0 || ch.cancels_pending > 0;
  if (!waits || ch.tx.active || ch.ack_close.active) return false;
  ch.held_close.assign(close.raw.begin(), close.raw.end());
  ch.held_close_since_ms = clock_ms_;
  return true;
}

void Session::release_held_close(ChannelState& ch, bool overdue) {
  const bool waits = ch.taken_over_count() > 0 || ch.cancels_pending > 0;
  if (ch.held_close.empty() || (waits && !overdue)) return;
  if (content_in_progress(Side::broker)) return;  // the next flush or tick sends it
  amqp::Bytes close = std::move(ch.held_close);
  ch.held_close.clear();
  emit(Side::broker, close);
}

bool Session::content_in_progress(Side to) const {
  for (const auto& [number, ch] : channels_) {
    const ContentState& state = to == Side::broker ? ch.from_client : ch.to_client;
    if (state.in_progress()) return true;
  }
  return false;
}

}  // namespace nackguard::session
