// A consumer's crash: its channel.close, connection.close or its connection's end (EOF, garbage)
// with deliveries in its hands. The observer counts each of them at that moment and may take
// some over (on_returned with can_take_over): the proxy then keeps the delivery from the
// broker, publishes a copy that carries what the broker's requeue cannot (a count, a delay, a
// dead-letter), and acks the original once the copy is confirmed. The close waits until then
// (as it does for a copy already in flight, which it would otherwise duplicate),
// 45 s at most (kCrashHoldMs): a channel.close in held_close, a connection.close in
// held_connection_close_, an EOF in client_gone_ (the client side closed, the broker side
// still open). The deliveries the client did not hold (held back, or handed out after the
// crash) go back to the broker uncounted at the close. A gone client's broker side ends with
// a connection.close of the proxy's (end_gone_client), not with the socket: RabbitMQ may stop
// the channels of a connection whose socket ended before it applied the acks just read on it,
// and requeue originals beside their confirmed copies (issue 37).

#include <algorithm>

#include "proxy/amqp/method_codec.hpp"
#include "proxy/session/session.hpp"

namespace nackguard::session {

namespace {
// A copy's confirm waits 30 s at most (guard.cpp), and its settlement releases the
// close: this bound only keeps a close from waiting for ever should none come.
constexpr std::int64_t kCrashHoldMs = 45000;
// How long a gone client's broker side waits for the close-ok of end_gone_client's close.
constexpr std::int64_t kGoneCloseOkMs = 10000;
}  // namespace

bool Session::crash_channel(ChannelState& ch, ReturnCause cause, bool solo, bool can_take_over) {
  can_take_over = can_take_over && phase_ == Phase::open && proxy_close_ == ProxyClose::none &&
                  !broker_closing_ && !ch.tx.active && !ch.ack_close.active;
  ch.crash_tag = ch.last_client_tag();
  ch.client_left = true;
  const ReturnContext context{.solo = solo, .can_take_over = can_take_over};
  std::vector<TakeOver> taken;
  for (std::uint64_t tag : ch.in_hand_tags()) {
    const Delivery* d = ch.find_unacked(tag);
    if (!d) continue;
    ReturnDecision decision = observer_->on_returned(*d, cause, context);
    if (!decision.take_over || !can_take_over) continue;
    std::vector<Delivery> one = ch.take_settled(tag, false);
    if (one.empty()) continue;
    ch.gate.settled(tag);
    taken.push_back(std::move(*decision.take_over));
    ch.add_taken_over(std::move(one.front()));
  }
  // Held back behind a suspect, never in the client's hands: kept from the broker's requeue
  // too, when the observer can (its redelivered flag would read as a return elsewhere).
  std::vector<std::uint64_t> held;
  for (const ChannelState::HeldBackDelivery& h : ch.held_back) {
    if (h.delivery.no_ack || !can_take_over) continue;
    if (observer_->on_returned(h.delivery, ReturnCause::unseen, ReturnContext{false, true})
            .action == ReturnAction::take_over) {
      held.push_back(h.delivery.broker_tag);
    }
  }
  observer_->on_returns_done();
  const std::uint16_t number = number_of(ch);
  if (can_take_over) stop_consumers(ch, number);
  for (TakeOver& take_over : taken) {
    const Ticket& t = take_over.ticket();
    carry_out(t.channel, t.broker_tag, std::move(take_over));
  }
  for (std::uint64_t broker_tag : held) router_.take_over_held_back(ch, broker_tag);
  carry_out_router_take_overs();
  if (ch.held_back.empty()) ch.gate.open();
  return !taken.empty() || !held.empty();
}

std::uint16_t Session::number_of(const ChannelState& ch) const {
  for (const auto& [number, state] : channels_) {
    if (&state == &ch) return number;
  }
  return 0;
}

void Session::stop_consumers(ChannelState& ch, std::uint16_t number) {
  // While the close waits, the broker would go on delivering to the consumers of a client
  // that holds nothing any more, and return at the close what it sent meanwhile, redelivered
  // without a return of theirs, which any other sidecar would count. Cancelled, it stops; what
  // was on its way still comes (Delivery::unseen), and the close waits for the cancel-oks.
  // A broker that closes the connection answers no cancel: nothing would release the close.
  if (ch.consumers_cancelled || broker_closing_) return;
  ch.consumers_cancelled = true;
  for (const auto& [tag, consumer] : ch.consumers) {
    amqp::Bytes frame;
    if (amqp::append_method_frame(frame, number, amqp::BasicCancel{tag, false})) {
      inject(Side::broker, std::move(frame));
      ++ch.cancels_pending;
    }
  }
}

void Session::stop_all_consumers() {
  for (auto& [number, ch] : channels_) stop_consumers(ch, number);
}

bool Session::crash_connection(bool can_take_over) {
  std::size_t in_hand = 0;
  std::vector<std::uint16_t> numbers;
  for (const auto& [number, ch] : channels_) {
    in_hand += ch.in_hand_tags().size();
    numbers.push_back(number);
  }
  std::sort(numbers.begin(), numbers.end());
  bool taken = false;
  for (std::uint16_t number : numbers) {
    ChannelState& ch = channel_state(number);
    if (ch.crash_tag != 0) continue;  // its own close counted it already
    taken = crash_channel(ch, ReturnCause::connection_closed, in_hand == 1, can_take_over) || taken;
  }
  return taken;
}

bool Session::close_must_wait() const {
  if (broker_closing_) return false;  // nothing the broker sends now can settle anything
  for (const auto& [number, ch] : channels_) {
    if (ch.taken_over_count() > 0 || ch.cancels_pending > 0) return true;
  }
  return false;
}

void Session::release_crash_holds(bool overdue) {
  if (held_connection_close_.empty() && !client_gone_) return;
  if (close_must_wait() && !overdue) return;
  if (!held_connection_close_.empty()) {
    if (content_in_progress(Side::broker)) return;  // the next flush or tick sends it
    amqp::Bytes close = std::move(held_connection_close_);
    held_connection_close_.clear();
    emit(Side::broker, close);
    return;
  }
  client_gone_ = false;
  end_gone_client();
}

void Session::end_gone_client() {
  // Mid-publish, the broker would take the close for content; closing, it answers no close.
  const bool can_close = phase_ == Phase::open && proxy_close_ == ProxyClose::none &&
                         !broker_closing_ && !content_in_progress(Side::broker);
  end_all_channels(ReturnCause::connection_closed);
  if (!can_close) {
    close_both_after_flush();
    return;
  }
  io(Side::client).out.close();
  io(Side::client).input_closed = true;
  drop_all_injections(Side::broker);  // none wait: no content is in progress
  emit_connection_close(Side::broker, amqp::reply::success,
                        "nackguard: the client connection ended");
  proxy_close_ = ProxyClose::awaiting_broker;
  gone_close_sent_ = true;
  gone_close_since_ms_ = clock_ms_;
}

void Session::tick_crash_holds(std::int64_t now_ms) {
  if (gone_close_sent_ && phase_ != Phase::closed) {
    if (gone_close_since_ms_ < 0) gone_close_since_ms_ = now_ms;
    // No close-ok in time: the socket ends it.
    if (now_ms - gone_close_since_ms_ >= kGoneCloseOkMs) close_both_after_flush();
    return;
  }
  if (held_connection_close_.empty() && !client_gone_) return;
  if (crash_hold_since_ms_ < 0) crash_hold_since_ms_ = now_ms;
  release_crash_holds(now_ms - crash_hold_since_ms_ >= kCrashHoldMs);
}

bool Session::hold_client_connection_close(const amqp::Frame& close) {
  // Also when a copy taken over earlier is in flight: closed now, the broker would requeue its
  // original beside the copy, a duplicate.
  crash_connection(true);
  stop_all_consumers();
  if (!close_must_wait()) return false;
  held_connection_close_.assign(close.raw.begin(), close.raw.end());
  crash_hold_since_ms_ = clock_ms_;
  return true;
}

void Session::client_gone() {
  io(Side::client).out.close();  // nothing more can reach it
  // A publish the client cut off half way keeps the broker from taking any frame of the
  // proxy's on that connection (settlements wait for a frame boundary): nothing can be settled.
  const bool can_settle = !content_in_progress(Side::broker);
  crash_connection(can_settle);
  if (can_settle) stop_all_consumers();
  if (can_settle && close_must_wait()) {
    client_gone_ = true;
    crash_hold_since_ms_ = clock_ms_;
    return;
  }
  end_gone_client();
}

}  // namespace nackguard::session
