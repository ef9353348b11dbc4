// A consumer's crash: its channel.close, connection.close or its connection's end (EOF, garbage)
// with deliveries in its hands. The observer counts each of them at that moment and may take
// some over (on_returned with can_take_over): the proxy then keeps the delivery from the
// broker, publishes a copy that carries what the broker's requeue cannot (a count, a delay, a
// dead-letter), and acks the original once the copy is confirmed. The close waits until then
// (as it does for a copy already in flight, which it would otherwise duplicate),
// 45 s at most: a channel.close in the channel's held_close (held_close.hpp), a
// connection.close or an EOF in connection_hold_ (connection_hold.hpp). The deliveries the client
// did not hold (held back, or handed out after the crash) go back to the broker uncounted at the
// close. A gone client's broker side ends with a connection.close of the proxy's (end_gone_client),
// not with the socket: RabbitMQ may stop the channels of a connection whose socket ended before it
// applied the acks just read on it, and requeue originals beside their confirmed copies (issue 37).

#include <algorithm>

#include "proxy/amqp/method_codec.hpp"
#include "proxy/session/session.hpp"

namespace nackguard::session {

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
  if (!connection_hold_.held()) return;
  if (close_must_wait() && !overdue) return;
  if (connection_hold_.close_held()) {
    if (content_in_progress(Side::broker)) return;  // the next flush or tick sends it
    emit(Side::broker, connection_hold_.take_close());
    return;
  }
  connection_hold_.release_gone();
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
  connection_hold_.mark_gone_close_sent(clock_ms_);
}

void Session::tick_crash_holds(std::int64_t now_ms) {
  if (connection_hold_.gone_close_sent() && phase_ != Phase::closed) {
    // No close-ok in time: the socket ends it.
    if (connection_hold_.gone_close_overdue(now_ms)) close_both_after_flush();
    return;
  }
  if (!connection_hold_.held()) return;
  release_crash_holds(connection_hold_.overdue(now_ms));
}

bool Session::hold_client_connection_close(const amqp::Frame& close) {
  // Also when a copy taken over earlier is in flight: closed now, the broker would requeue its
  // original beside the copy, a duplicate.
  crash_connection(true);
  stop_all_consumers();
  if (!close_must_wait()) return false;
  connection_hold_.hold_close(close.raw, clock_ms_);
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
    connection_hold_.hold_gone(clock_ms_);
    return;
  }
  end_gone_client();
}

}  // namespace nackguard::session
