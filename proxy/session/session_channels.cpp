// Channel-level methods from both sides: consumers, settlements and the delivery tag mapping
// (the deliveries themselves: session_deliveries.cpp).

#include <limits>

#include "proxy/amqp/method_codec.hpp"
#include "proxy/amqp/method_name.hpp"
#include "proxy/session/session.hpp"

namespace nackguard::session {

using amqp::ByteView;
using amqp::Frame;
using amqp::FrameType;
namespace mid = amqp::mid;
namespace reply = amqp::reply;

namespace {

// A tag the broker never issued, so a client's ack of an unknown tag still fails there.
constexpr std::uint64_t kUnknownTagBit = std::uint64_t{1} << 63;

}  // namespace

void Session::handle_client_channel_method(ChannelState& ch, const Frame& frame,
                                           std::uint32_t key) {
  auto malformed = [&] {
    protocol_error(Side::client, reply::frame_error,
                   "FRAME_ERROR - malformed " + std::string(amqp::method_name(key)));
  };
  switch (key) {
    case mid::basic_publish:
      ch.from_client.phase = ContentState::Phase::awaiting_header;
      break;
    case mid::basic_ack:
    case mid::basic_nack:
    case mid::basic_reject:
      if (!client_settlement(ch, frame, key)) malformed();
      return;
    case mid::basic_consume:
    case mid::basic_cancel:
    case mid::basic_get:
    case mid::basic_recover:
    case mid::basic_recover_async:
      if (!note_client_basic_method(ch, frame, key)) return malformed();
      break;
    case tx_mid::select:
    case tx_mid::commit:
    case tx_mid::rollback:
      return handle_client_tx_method(ch, frame, key);
    case mid::queue_declare: {
      amqp::QueueDeclare m;
      if (amqp::decode_method(frame.payload, m) != amqp::MethodError::none) return malformed();
      if (m.no_wait) ch.last_declared_queue = m.queue;
      if (!m.passive) observer_->on_queue_declare(m);
      break;
    }
    case mid::channel_close: {
      // A close the broker's own crossed: the broker takes nothing more on the channel.
      const bool broker_closed = ch.closing;
      ch.closing = true;
      if (ch.crash_tag == 0) {
        crash_channel(ch, ReturnCause::channel_closed, ch.in_hand_tags().size() == 1,
                      !broker_closed);
      }
      if (hold_client_close(ch, frame)) return;
      drop_injections(frame.channel);
      break;
    }
    case mid::channel_close_ok:
      // The client acknowledges the broker's channel.close: the channel is gone.
      emit(Side::broker, frame.raw);
      end_channel(frame.channel, ReturnCause::channel_closed);
      flush_injections(Side::broker);
      return;
    default:
      if (!amqp::is_spec_method(key)) return reject_unknown_method(frame.channel, key);
      break;
  }
  emit(Side::broker, frame.raw);
}

void Session::settle_from_client(ChannelState& ch, const Frame& frame, SettleKind kind,
                                 std::uint64_t tag, bool multiple, bool requeue) {
  // A tag above any the client was given is unknown to the broker too: settle nothing here,
  // and let the broker refuse it.
  bool unknown = tag > ch.last_client_tag();
  // The scratch vectors keep their capacity from one settlement to the next; in locals while
  // in use, so that the calls below (emit, the observer) do not reload them from memory.
  std::vector<Delivery> settled = std::move(settled_scratch_);
  std::vector<const Delivery*> forwarded = std::move(forwarded_scratch_);
  settled.clear();
  forwarded.clear();
  if (!unknown) ch.take_settled(tag, multiple, settled);
  std::vector<TakeOver> taken;
  bool gate_opened = false;
  for (const Delivery& d : settled) {
    if (ch.gate.settled(d.client_tag)) gate_opened = true;
    if (kind == SettleKind::ack || !requeue) {
      // In a transaction the settlement is the broker's at the commit (session_tx.cpp).
      if (ch.tx.active) {
        ch.tx_settle(d, kind, requeue);
      } else {
        if (!ChannelState::is_slim(d)) observer_->on_settled(d, kind);
      }
      forwarded.push_back(&d);
      continue;
    }
    ReturnCause cause = kind == SettleKind::nack ? ReturnCause::nack : ReturnCause::reject;
    // A slim record (kept past the budget) was never shown to the observer.
    std::optional<TakeOver> take_over;
    if (!ChannelState::is_slim(d)) take_over = observer_->on_client_return(d, cause);
    if (take_over) {
      ch.add_taken_over(d);
      // In a transaction the copy waits for the commit.
      (ch.tx.active ? ch.tx.takeovers : taken).push_back(std::move(*take_over));
    } else {
      if (ch.tx.active) ch.tx_settle(d, kind, requeue);
      forwarded.push_back(&d);
    }
  }
  for (TakeOver& take_over : taken) {
    const Ticket& t = take_over.ticket();
    carry_out(t.channel, t.broker_tag, std::move(take_over));
  }

  if (ch.tags_identical()) {
    emit(Side::broker, frame.raw);
  } else {
    write_settlement(ch, frame, kind, tag, multiple, requeue, unknown, settled, forwarded);
  }
  // Kept for the next one unless a large multiple settlement grew them; the deliveries'
  // buffers serve the next deliveries.
  constexpr std::size_t kKeptCapacity = 256;
  forwarded.clear();
  for (Delivery& d : settled) ch.recycle(std::move(d));
  settled.clear();
  if (settled.capacity() <= kKeptCapacity) settled_scratch_ = std::move(settled);
  if (forwarded.capacity() <= kKeptCapacity) forwarded_scratch_ = std::move(forwarded);
  // The suspect settled, or the last delivery a waiting suspect waited for.
  if (gate_opened || (ch.suspect_waits() && ch.unacked_count() == 0)) release_held_back(ch);
}

void Session::write_settlement(ChannelState& ch, const Frame& frame, SettleKind kind,
                               std::uint64_t tag, bool multiple, bool requeue, bool unknown,
                               const std::vector<Delivery>& settled,
                               const std::vector<const Delivery*>& forwarded) {
  amqp::Bytes out;
  // A delivery forwarded with no record (the budget was full) is outstanding at the broker
  // under its run's offset from the client's tag.
  // (A plain tag and flag: GCC's -O2 takes a std::optional here for maybe-uninitialized.)
  const std::optional<std::uint64_t> found = unknown ? std::nullopt : ch.untracked_broker_tag(tag);
  const bool untracked = found.has_value();
  const std::uint64_t untracked_tag = found.value_or(0);
  bool untracked_all = multiple && tag == 0 && ch.has_untracked();
  if (!multiple && untracked && settled.empty()) {
    append_settlement(out, frame.channel, kind, untracked_tag, false, requeue);
  } else if (multiple && (untracked || untracked_all)) {
    // One multiple settlement, as the client sent it, if it takes nothing of the proxy's;
    // else the recorded ones alone (the untracked ones stay with the broker, which
    // delivers them again when the channel ends: a duplicate, never a loss).
    std::uint64_t top = untracked ? untracked_tag : 0;
    std::uint64_t reach = untracked ? untracked_tag : std::numeric_limits<std::uint64_t>::max();
    if (forwarded.size() == settled.size() && !ch.owned_at_or_below(reach) &&
        !ch.unacked_at_or_below(reach)) {
      append_settlement(out, frame.channel, kind, top, true, requeue);
    } else {
      for (const Delivery* d : forwarded) {
        append_settlement(out, frame.channel, kind, d->broker_tag, false, requeue);
      }
    }
  } else if (settled.empty()) {
    // Nothing of the client's is outstanding: "all" settles nothing; an unknown tag must
    // still fail at the broker, and must not name a delivery the proxy owns.
    if (!(multiple && tag == 0)) {
      append_settlement(out, frame.channel, kind, kUnknownTagBit | tag, multiple, requeue);
    }
  } else if (!forwarded.empty()) {
    std::uint64_t highest = forwarded.back()->broker_tag;
    if (!multiple) {
      append_settlement(out, frame.channel, kind, highest, false, requeue);
    } else if (forwarded.size() == settled.size() && !ch.owned_at_or_below(highest) &&
               !ch.unacked_at_or_below(highest)) {
      append_settlement(out, frame.channel, kind, highest, true, requeue);
    } else {
      // A multiple settlement would take deliveries the proxy owns, or (after a reorder)
      // ones the client did not name, with it: expand.
      for (const Delivery* d : forwarded) {
        append_settlement(out, frame.channel, kind, d->broker_tag, false, requeue);
      }
    }
  }
  if (!out.empty()) emit(Side::broker, out);
}

void Session::handle_broker_channel_method(ChannelState& ch, const Frame& frame,
                                           std::uint32_t key) {
  auto malformed = [&] {
    protocol_error(Side::broker, reply::frame_error,
                   "FRAME_ERROR - malformed " + std::string(amqp::method_name(key)));
  };
  switch (key) {
    case mid::basic_deliver:
    case mid::basic_get_ok:
      if (!start_broker_delivery(ch, frame, key)) malformed();
      return;
    case mid::basic_get_empty:
      if (!ch.pending_gets.empty()) ch.pending_gets.pop_front();
      break;
    case mid::basic_return:
      ch.from_broker.phase = ContentState::Phase::awaiting_header;
      ch.to_client.phase = ContentState::Phase::awaiting_header;
      break;
    case mid::basic_consume_ok:
      if (!note_broker_consumer_method(ch, frame, key)) return malformed();
      break;
    case mid::basic_cancel:
      if (!note_broker_cancel(ch, frame)) return malformed();
      break;
    case mid::basic_cancel_ok:
      if (!note_broker_consumer_method(ch, frame, key)) return malformed();
      // A client that left, or closes the channel, takes no cancel-ok (it discards all but the
      // close-ok): the proxy's cancels are answered to the proxy alone.
      if (ch.cancels_pending == 0) emit(Side::client, frame.raw);
      if (ch.cancels_pending > 0 && --ch.cancels_pending == 0) {
        // The last cancel of a client that left: a close waiting for it may go now
        // (session_crash.cpp). Last: it may end the connection, and `ch` with it.
        release_held_close(ch);
        release_crash_holds(false);
      }
      return;
    case mid::queue_declare_ok: {
      amqp::QueueDeclareOk m;
      if (amqp::decode_method(frame.payload, m) != amqp::MethodError::none) return malformed();
      ch.last_declared_queue = m.queue;
      break;
    }
    case mid::channel_close:
      ch.closing = true;
      ch.held_close.drop();  // the broker ends the channel: the client's close crossed it
      drop_injections(frame.channel);
      tx_abandon(ch);  // the client's close-ok may wait behind a held commit
      note_broker_channel_close(ch, frame);
      break;
    case mid::channel_close_ok:
      emit(Side::client, frame.raw);
      end_channel(frame.channel, ReturnCause::channel_closed);
      flush_injections(Side::client);
      return;
    default:
      break;
  }
  emit(Side::client, frame.raw);
}

// ---- basic-class bookkeeping: which consumer or get a delivery belongs to, recovers, and
// the start of a delivery. Each is false for a method that does not decode: the caller closes
// with 501. In this file so that the compiler may inline them into the dispatch above.

bool Session::client_settlement(ChannelState& ch, const Frame& frame, std::uint32_t key) {
  switch (key) {
    case mid::basic_ack: {
      amqp::BasicAck m;
      if (amqp::decode_method(frame.payload, m) != amqp::MethodError::none) return false;
      settle_from_client(ch, frame, SettleKind::ack, m.delivery_tag, m.multiple, false);
      return true;
    }
    case mid::basic_nack: {
      amqp::BasicNack m;
      if (amqp::decode_method(frame.payload, m) != amqp::MethodError::none) return false;
      settle_from_client(ch, frame, SettleKind::nack, m.delivery_tag, m.multiple, m.requeue);
      return true;
    }
    default: {
      amqp::BasicReject m;
      if (amqp::decode_method(frame.payload, m) != amqp::MethodError::none) return false;
      settle_from_client(ch, frame, SettleKind::reject, m.delivery_tag, false, m.requeue);
      return true;
    }
  }
}

bool Session::note_client_basic_method(ChannelState& ch, const Frame& frame, std::uint32_t key) {
  switch (key) {
    case mid::basic_consume: {
      amqp::BasicConsume m;
      if (amqp::decode_method(frame.payload, m) != amqp::MethodError::none) return false;
      std::string queue = m.queue.empty() ? ch.last_declared_queue : m.queue;
      if (m.no_wait) {
        ch.consumers[m.consumer_tag] = Consumer{queue, m.no_ack};
      } else {
        ch.pending_consumes.push_back(PendingConsume{queue, m.consumer_tag, m.no_ack});
      }
      return true;
    }
    case mid::basic_cancel: {
      amqp::BasicCancel m;
      if (amqp::decode_method(frame.payload, m) != amqp::MethodError::none) return false;
      // The consumer's deliveries in flight still arrive until cancel-ok; forget it then, or
      // with no-wait keep it among the recently cancelled.
      if (m.no_wait) ch.forget_consumer(m.consumer_tag);
      return true;
    }
    case mid::basic_get: {
      amqp::BasicGet m;
      if (amqp::decode_method(frame.payload, m) != amqp::MethodError::none) return false;
      ch.pending_gets.push_back(
          PendingGet{m.queue.empty() ? ch.last_declared_queue : m.queue, m.no_ack});
      return true;
    }
    default: {  // basic.recover, basic.recover-async
      amqp::BasicRecover m;
      amqp::BasicRecoverAsync async;
      bool ok = key == mid::basic_recover
                    ? amqp::decode_method(frame.payload, m) == amqp::MethodError::none
                    : amqp::decode_method(frame.payload, async) == amqp::MethodError::none;
      if (!ok) return false;
      // The broker requeues everything unacked on the channel, the proxy's own included.
      if (key == mid::basic_recover ? m.requeue : async.requeue) {
        return_all(ch, ReturnCause::recover);
      }
      return true;
    }
  }
}

bool Session::start_broker_delivery(ChannelState& ch, const Frame& frame, std::uint32_t key) {
  Delivery d = ch.fresh_delivery();
  if (key == mid::basic_deliver) {
    // Decoded into buffers that served earlier deliveries: no allocation per delivery.
    amqp::BasicDeliver& m = deliver_scratch_;
    if (amqp::decode_method(frame.payload, m) != amqp::MethodError::none) return false;
    if (const Consumer* consumer = ch.find_consumer(m.consumer_tag)) {
      d.queue = consumer->queue;
      d.no_ack = consumer->no_ack;
    }
    d.consumer_tag = m.consumer_tag;
    d.broker_tag = m.delivery_tag;
    d.redelivered = m.redelivered;
    d.exchange = m.exchange;
    d.routing_key = m.routing_key;
  } else {
    amqp::BasicGetOk m;
    if (amqp::decode_method(frame.payload, m) != amqp::MethodError::none) return false;
    if (!ch.pending_gets.empty()) {
      d.queue = ch.pending_gets.front().queue;
      d.no_ack = ch.pending_gets.front().no_ack;
      ch.pending_gets.pop_front();
    }
    d.from_get = true;
    d.broker_tag = m.delivery_tag;
    d.redelivered = m.redelivered;
    d.exchange = std::move(m.exchange);
    d.routing_key = std::move(m.routing_key);
  }
  router_.begin(ch, frame, std::move(d));
  return true;
}

bool Session::note_broker_consumer_method(ChannelState& ch, const Frame& frame, std::uint32_t key) {
  if (key == mid::basic_consume_ok) {
    amqp::BasicConsumeOk m;
    if (amqp::decode_method(frame.payload, m) != amqp::MethodError::none) return false;
    Consumer consumer;
    if (!ch.pending_consumes.empty()) {
      consumer.queue = ch.pending_consumes.front().queue;
      consumer.no_ack = ch.pending_consumes.front().no_ack;
      ch.pending_consumes.pop_front();
    }
    ch.consumers[m.consumer_tag] = std::move(consumer);
    return true;
  }
  // basic.cancel or cancel-ok: the same fields either way; a broker-sent cancel has a no-wait
  // bit after the tag.
  amqp::ByteReader in(frame.payload.subspan(4));
  std::string tag = in.shortstr();
  if (!in.ok()) return false;
  ch.forget_consumer(tag);
  return true;
}

}  // namespace nackguard::session
