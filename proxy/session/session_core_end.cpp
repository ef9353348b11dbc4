// How a connection's handling ends (session_core.hpp): a consumer's crash, a protocol error, the
// connection's close.
//
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
#include "proxy/session/session_core.hpp"

namespace nackguard::session {

using amqp::Frame;
using amqp::FrameType;
namespace mid = amqp::mid;
namespace reply = amqp::reply;

// ---- a consumer's crash ----

bool SessionCore::crash_channel(ChannelState& ch, ReturnCause cause, bool solo,
                                bool can_take_over) {
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

std::uint16_t SessionCore::number_of(const ChannelState& ch) const {
  for (const auto& [number, state] : channels_) {
    if (&state == &ch) return number;
  }
  return 0;
}

void SessionCore::stop_consumers(ChannelState& ch, std::uint16_t number) {
  // While the close waits, the broker would go on delivering to the consumers of a client
  // that holds nothing any more, and return at the close what it sent meanwhile, redelivered
  // without a return of theirs, which any other sidecar would count. Cancelled, it stops; what
  // was on its way still comes (Delivery::unseen), and the close waits for the cancel-oks.
  // A broker that closes the connection answers no cancel: nothing would release the close.
  if (ch.consumers_cancelled || broker_closing_) return;
  ch.consumers_cancelled = true;
  for (const auto& [tag, consumer] : ch.book.consumers) {
    amqp::Bytes frame;
    if (amqp::append_method_frame(frame, number, amqp::BasicCancel{tag, false})) {
      inject(Side::broker, std::move(frame));
      ++ch.cancels_pending;
    }
  }
}

void SessionCore::stop_all_consumers() {
  for (auto& [number, ch] : channels_) stop_consumers(ch, number);
}

bool SessionCore::crash_connection(bool can_take_over) {
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

bool SessionCore::close_must_wait() const {
  if (broker_closing_) return false;  // nothing the broker sends now can settle anything
  for (const auto& [number, ch] : channels_) {
    if (ch.taken_over_count() > 0 || ch.cancels_pending > 0) return true;
  }
  return false;
}

void SessionCore::release_crash_holds(bool overdue) {
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

void SessionCore::end_gone_client() {
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

void SessionCore::tick_crash_holds(std::int64_t now_ms) {
  if (connection_hold_.gone_close_sent() && phase_ != Phase::closed) {
    // No close-ok in time: the socket ends it.
    if (connection_hold_.gone_close_overdue(now_ms)) close_both_after_flush();
    return;
  }
  if (!connection_hold_.held()) return;
  release_crash_holds(connection_hold_.overdue(now_ms));
}

bool SessionCore::hold_client_connection_close(const amqp::Frame& close) {
  // Also when a copy taken over earlier is in flight: closed now, the broker would requeue its
  // original beside the copy, a duplicate.
  crash_connection(true);
  stop_all_consumers();
  if (!close_must_wait()) return false;
  connection_hold_.hold_close(close.raw, clock_ms_);
  return true;
}

void SessionCore::client_gone() {
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

// ---- the connection's end: the proxy's own close at shutdown, a protocol error from either
// side, a client's unknown method. Each ends every channel, reporting what goes back to the
// broker, and closes both sides once their output is written.

void SessionCore::emit_connection_close(Side to, std::uint16_t code, std::string text) {
  amqp::ConnectionClose close;
  close.reply_code = code;
  close.reply_text = std::move(text);
  amqp::Bytes frame;
  amqp::append_close_frame(frame, 0, close);
  emit(to, frame);
}

void SessionCore::close_both_after_flush() {
  awaiting_client_close_ = false;
  for (auto& side : io_) {
    side.out.close();
    side.input_closed = true;
  }
  drop_all_injections(Side::client);
  drop_all_injections(Side::broker);
  phase_ = Phase::closed;
}

void SessionCore::close_broker_await_client() {
  SideIo& broker = io(Side::broker);
  broker.out.close();
  broker.input_closed = true;
  drop_all_injections(Side::broker);
  phase_ = Phase::closed;
  // What the client sends now is dropped (process()); its EOF closes its side (on_eof), or
  // kClientCloseGraceMs do (on_tick). Closed at once, the socket would end under a client
  // that reads its close-ok while it closes: the Go client took that EOF for an error.
  client_close_waited_.start(clock_ms_);
  awaiting_client_close_ = true;
}

void SessionCore::tick_client_close(std::int64_t now_ms) {
  if (!awaiting_client_close_ || !client_close_waited_.past(now_ms, kClientCloseGraceMs)) return;
  awaiting_client_close_ = false;
  io(Side::client).out.close();
  io(Side::client).input_closed = true;
}

void SessionCore::protocol_error(Side offender, std::uint16_t code, std::string text,
                                 std::uint32_t failing_method) {
  if (phase_ == Phase::closed && finished()) return;
  bool was_open = phase_ == Phase::open;
  amqp::ConnectionClose close;
  close.reply_code = code;
  close.reply_text = std::move(text);
  close.class_id = static_cast<std::uint16_t>(failing_method >> 16);
  close.method_id = static_cast<std::uint16_t>(failing_method & 0xFFFF);
  amqp::Bytes frame;
  amqp::append_close_frame(frame, 0, close);
  emit(offender, frame);
  if (offender == Side::broker && was_open) {
    emit_connection_close(Side::client, reply::connection_forced,
                          "CONNECTION_FORCED - nackguard: the broker sent invalid data");
  }
  // What the client held is counted as a crash, the connection being one deliveries.
  if (offender == Side::client) crash_connection(false);
  end_all_channels(offender == Side::broker ? ReturnCause::broker_lost
                                            : ReturnCause::connection_closed);
  close_both_after_flush();
}

void SessionCore::reject_unknown_method(std::uint16_t channel, std::uint32_t key) {
  std::string ids =
      "class " + std::to_string(key >> 16) + ", method " + std::to_string(key & 0xFFFF);
  if (phase_ == Phase::open) {
    // Forwarded, such a method crashes RabbitMQ 3.10's connection process (the client then
    // gets 320 with no cause). The broker gets the close a client sends, then the socket ends.
    emit_connection_close(
        Side::broker, reply::success,
        "nackguard: the client sent a method AMQP 0-9-1 does not have (" + ids + ")");
  }
  protocol_error(Side::client, reply::not_implemented,
                 "NOT_IMPLEMENTED - nackguard: unknown method (" + ids + ") on channel " +
                     std::to_string(channel) + "; AMQP 0-9-1 has no such method",
                 key);
}

std::shared_ptr<retry::RetainedBody> SessionCore::reserve_kept_frame(const Frame& frame,
                                                                     std::string_view waiting_for) {
  auto reservation = retry::RetainedBody::make(options_.body_budget, frame.raw.size());
  if (!reservation) {
    protocol_error(Side::client, reply::resource_error,
                   "RESOURCE_ERROR - nackguard: channel " + std::to_string(frame.channel) +
                       " sent more than limits.retained_body_bytes allows while " +
                       std::string(waiting_for));
  }
  return reservation;
}

}  // namespace nackguard::session
