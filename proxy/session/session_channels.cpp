// Channel-level frames: consumers, deliveries, settlements and the delivery tag mapping.

#include <limits>

#include "proxy/amqp/method_codec.hpp"
#include "proxy/session/session.hpp"

namespace nackguard::session {

using amqp::ByteView;
using amqp::Frame;
using amqp::FrameType;
namespace mid = amqp::mid;
namespace reply = amqp::reply;

namespace {

// Where the delivery tag sits in a deliver or get-ok method payload: after the class and
// method ids, and for deliver after the consumer tag too.
std::size_t delivery_tag_offset(std::uint32_t key, const std::string& consumer_tag) {
  return 4 + (key == mid::basic_deliver ? 1 + consumer_tag.size() : 0);
}

void patch_u64(amqp::Bytes& bytes, std::size_t at, std::uint64_t value) {
  for (int i = 0; i < 8; ++i) bytes[at + i] = static_cast<std::uint8_t>(value >> (56 - 8 * i));
}

// A tag the broker never issued, so a client's ack of an unknown tag still fails there.
constexpr std::uint64_t kUnknownTagBit = std::uint64_t{1} << 63;

// What buffering a delivery's frames costs: its method and header frames, its body, and the
// overhead of body frames of at least the smallest frame_max. A hostile broker's body_size
// near 2^64 saturates the sum instead of wrapping it to a small reservation; it is then
// refused like any body too large for the budget, and the delivery is forwarded.
std::uint64_t buffered_frames_cost(std::uint64_t method_and_header, std::uint64_t body_size) {
  constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
  // At most 8 * (2^64 / 4096 + 1): no wrap.
  std::uint64_t overhead = amqp::kFrameOverhead * (body_size / amqp::kFrameMinSize + 1);
  if (body_size > kMax - overhead - method_and_header) return kMax;
  return method_and_header + body_size + overhead;
}

// Whether the record of `d` fits within the body budget (no budget: always).
bool admit_record(ChannelState& ch, const Delivery& d, BodyBudget* budget) {
  ch.use_budget(budget);
  if (!budget || budget->has_room(ChannelState::record_cost(d))) return true;
  budget->note_untracked();
  return false;
}

void append_settle(amqp::Bytes& out, std::uint16_t channel, SettleKind kind, std::uint64_t tag,
                   bool multiple, bool requeue) {
  switch (kind) {
    case SettleKind::ack:
      amqp::append_fixed_method_frame(out, channel, amqp::BasicAck{tag, multiple});
      break;
    case SettleKind::nack:
      amqp::append_fixed_method_frame(out, channel, amqp::BasicNack{tag, multiple, requeue});
      break;
    case SettleKind::reject:
      amqp::append_fixed_method_frame(out, channel, amqp::BasicReject{tag, requeue});
      break;
  }
}

}  // namespace

void Session::handle_client_channel_method(ChannelState& ch, const Frame& frame,
                                           std::uint32_t key) {
  auto malformed = [&](const char* what) {
    protocol_error(Side::client, reply::frame_error,
                   std::string("FRAME_ERROR - malformed ") + what);
  };
  switch (key) {
    case mid::basic_publish:
      ch.from_client.phase = ContentState::Phase::awaiting_header;
      break;
    case mid::basic_ack: {
      amqp::BasicAck m;
      if (amqp::decode_method(frame.payload, m) != amqp::MethodError::none)
        return malformed("basic.ack");
      settle_from_client(ch, frame, SettleKind::ack, m.delivery_tag, m.multiple, false);
      return;
    }
    case mid::basic_nack: {
      amqp::BasicNack m;
      if (amqp::decode_method(frame.payload, m) != amqp::MethodError::none)
        return malformed("basic.nack");
      settle_from_client(ch, frame, SettleKind::nack, m.delivery_tag, m.multiple, m.requeue);
      return;
    }
    case mid::basic_reject: {
      amqp::BasicReject m;
      if (amqp::decode_method(frame.payload, m) != amqp::MethodError::none)
        return malformed("basic.reject");
      settle_from_client(ch, frame, SettleKind::reject, m.delivery_tag, false, m.requeue);
      return;
    }
    case mid::basic_consume: {
      amqp::BasicConsume m;
      if (amqp::decode_method(frame.payload, m) != amqp::MethodError::none)
        return malformed("basic.consume");
      std::string queue = m.queue.empty() ? ch.last_declared_queue : m.queue;
      if (m.no_wait) {
        ch.consumers[m.consumer_tag] = Consumer{queue, m.no_ack};
      } else {
        ch.pending_consumes.push_back(PendingConsume{queue, m.consumer_tag, m.no_ack});
      }
      break;
    }
    case mid::basic_cancel: {
      amqp::BasicCancel m;
      if (amqp::decode_method(frame.payload, m) != amqp::MethodError::none)
        return malformed("basic.cancel");
      // The consumer's deliveries in flight still arrive until cancel-ok; forget it then, or
      // with no-wait keep it among the recently cancelled.
      if (m.no_wait) ch.forget_consumer(m.consumer_tag);
      break;
    }
    case mid::basic_get: {
      amqp::BasicGet m;
      if (amqp::decode_method(frame.payload, m) != amqp::MethodError::none)
        return malformed("basic.get");
      ch.pending_gets.push_back(
          PendingGet{m.queue.empty() ? ch.last_declared_queue : m.queue, m.no_ack});
      break;
    }
    case mid::basic_recover:
    case mid::basic_recover_async: {
      amqp::BasicRecover m;
      amqp::BasicRecoverAsync async;
      bool ok = key == mid::basic_recover
                    ? amqp::decode_method(frame.payload, m) == amqp::MethodError::none
                    : amqp::decode_method(frame.payload, async) == amqp::MethodError::none;
      if (!ok) return malformed("basic.recover");
      // The broker requeues everything unacked on the channel, the proxy's own included.
      if (key == mid::basic_recover ? m.requeue : async.requeue) {
        return_all(ch, ReturnCause::recover);
      }
      break;
    }
    case tx_mid::select:
    case tx_mid::commit:
    case tx_mid::rollback:
      return handle_client_tx_method(ch, frame, key);
    case mid::queue_declare: {
      amqp::QueueDeclare m;
      if (amqp::decode_method(frame.payload, m) != amqp::MethodError::none)
        return malformed("queue.declare");
      if (m.no_wait) ch.last_declared_queue = m.queue;
      if (!m.passive) observer_->on_queue_declare(m);
      break;
    }
    case mid::channel_close:
      ch.closing = true;
      drop_injections(frame.channel);
      break;
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
  // The scratch vectors keep their capacity from one settlement to the next; taken out of
  // the members so that a settlement reached from an observer callback gets its own.
  std::vector<Delivery> settled = std::move(settled_scratch_);
  std::vector<const Delivery*> forwarded = std::move(forwarded_scratch_);
  settled.clear();
  forwarded.clear();
  if (!unknown) ch.take_settled(tag, multiple, settled);
  std::vector<std::uint64_t> taken;
  bool gate_opened = false;
  for (const Delivery& d : settled) {
    if (ch.exclusive_client_tag != 0 && d.client_tag == ch.exclusive_client_tag) {
      ch.exclusive_client_tag = 0;
      gate_opened = true;
    }
    if (kind == SettleKind::ack || !requeue) {
      // In a transaction the settlement is the broker's at the commit (session_tx.cpp).
      if (ch.tx.active) {
        ch.tx.settled.push_back({d, kind, requeue});
      } else {
        if (!ChannelState::is_slim(d)) observer_->on_settled(d, kind);
      }
      forwarded.push_back(&d);
      continue;
    }
    ReturnCause cause = kind == SettleKind::nack ? ReturnCause::nack : ReturnCause::reject;
    // A slim record (kept past the budget) was never shown to the observer.
    if (!ChannelState::is_slim(d) &&
        observer_->on_client_return(d, cause) == ReturnAction::take_over) {
      ch.add_withheld(d);
      // In a transaction the copy waits for the commit.
      (ch.tx.active ? ch.tx.takeovers : taken).push_back(d.broker_tag);
    } else {
      if (ch.tx.active) ch.tx.settled.push_back({d, kind, requeue});
      forwarded.push_back(&d);
    }
  }
  for (std::uint64_t broker_tag : taken) {
    if (const Delivery* d = ch.find_withheld(broker_tag)) observer_->on_taken_over(*d);
  }

  if (ch.tags_identical()) {
    emit(Side::broker, frame.raw);
  } else {
    amqp::Bytes out;
    // A delivery forwarded with no record (the budget was full) is outstanding at the broker
    // under its run's offset from the client's tag.
    std::optional<std::uint64_t> untracked = unknown ? std::nullopt : ch.untracked_broker_tag(tag);
    bool untracked_all = multiple && tag == 0 && ch.has_untracked();
    if (!multiple && untracked && settled.empty()) {
      append_settle(out, frame.channel, kind, *untracked, false, requeue);
    } else if (multiple && (untracked || untracked_all)) {
      // One multiple settlement, as the client sent it, if it takes nothing of the proxy's;
      // else the recorded ones alone (the untracked ones stay with the broker, which
      // delivers them again when the channel ends: a duplicate, never a loss).
      std::uint64_t top = untracked ? *untracked : 0;
      std::uint64_t reach = untracked ? *untracked : std::numeric_limits<std::uint64_t>::max();
      if (forwarded.size() == settled.size() && !ch.owned_at_or_below(reach) &&
          !ch.unacked_at_or_below(reach)) {
        append_settle(out, frame.channel, kind, top, true, requeue);
      } else {
        for (const Delivery* d : forwarded) {
          append_settle(out, frame.channel, kind, d->broker_tag, false, requeue);
        }
      }
    } else if (settled.empty()) {
      // Nothing of the client's is outstanding: "all" settles nothing; an unknown tag must
      // still fail at the broker, and must not name a delivery the proxy owns.
      if (!(multiple && tag == 0)) {
        append_settle(out, frame.channel, kind, kUnknownTagBit | tag, multiple, requeue);
      }
    } else if (!forwarded.empty()) {
      std::uint64_t highest = forwarded.back()->broker_tag;
      if (!multiple) {
        append_settle(out, frame.channel, kind, highest, false, requeue);
      } else if (forwarded.size() == settled.size() && !ch.owned_at_or_below(highest) &&
                 !ch.unacked_at_or_below(highest)) {
        append_settle(out, frame.channel, kind, highest, true, requeue);
      } else {
        // A multiple settlement would take deliveries the proxy owns, or (after a reorder)
        // ones the client did not name, with it: expand.
        for (const Delivery* d : forwarded) {
          append_settle(out, frame.channel, kind, d->broker_tag, false, requeue);
        }
      }
    }
    if (!out.empty()) emit(Side::broker, out);
  }
  // Kept for the next one unless a large multiple settlement grew them.
  constexpr std::size_t kKeptCapacity = 256;
  settled.clear();
  forwarded.clear();
  if (settled.capacity() <= kKeptCapacity) settled_scratch_ = std::move(settled);
  if (forwarded.capacity() <= kKeptCapacity) forwarded_scratch_ = std::move(forwarded);
  if (gate_opened) release_held(ch);
}

void Session::handle_broker_channel_method(ChannelState& ch, const Frame& frame,
                                           std::uint32_t key) {
  auto malformed = [&](const char* what) {
    protocol_error(Side::broker, reply::frame_error,
                   std::string("FRAME_ERROR - malformed ") + what);
  };
  switch (key) {
    case mid::basic_deliver: {
      amqp::BasicDeliver m;
      if (amqp::decode_method(frame.payload, m) != amqp::MethodError::none)
        return malformed("basic.deliver");
      Delivery d;
      if (const Consumer* consumer = ch.find_consumer(m.consumer_tag)) {
        d.queue = consumer->queue;
        d.no_ack = consumer->no_ack;
      }
      d.consumer_tag = std::move(m.consumer_tag);
      d.broker_tag = m.delivery_tag;
      d.redelivered = m.redelivered;
      d.exchange = std::move(m.exchange);
      d.routing_key = std::move(m.routing_key);
      begin_delivery(ch, frame, std::move(d));
      return;
    }
    case mid::basic_get_ok: {
      amqp::BasicGetOk m;
      if (amqp::decode_method(frame.payload, m) != amqp::MethodError::none)
        return malformed("basic.get-ok");
      Delivery d;
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
      begin_delivery(ch, frame, std::move(d));
      return;
    }
    case mid::basic_get_empty:
      if (!ch.pending_gets.empty()) ch.pending_gets.pop_front();
      break;
    case mid::basic_return:
      ch.from_broker.phase = ContentState::Phase::awaiting_header;
      ch.to_client.phase = ContentState::Phase::awaiting_header;
      break;
    case mid::basic_consume_ok: {
      amqp::BasicConsumeOk m;
      if (amqp::decode_method(frame.payload, m) != amqp::MethodError::none)
        return malformed("basic.consume-ok");
      Consumer consumer;
      if (!ch.pending_consumes.empty()) {
        consumer.queue = ch.pending_consumes.front().queue;
        consumer.no_ack = ch.pending_consumes.front().no_ack;
        ch.pending_consumes.pop_front();
      }
      ch.consumers[m.consumer_tag] = std::move(consumer);
      break;
    }
    case mid::basic_cancel:
    case mid::basic_cancel_ok: {
      // The same fields either way; a broker-sent cancel has a no-wait bit after the tag.
      amqp::ByteReader in(frame.payload.subspan(4));
      std::string tag = in.shortstr();
      if (!in.ok()) return malformed("basic.cancel");
      ch.forget_consumer(tag);
      break;
    }
    case mid::queue_declare_ok: {
      amqp::QueueDeclareOk m;
      if (amqp::decode_method(frame.payload, m) != amqp::MethodError::none)
        return malformed("queue.declare-ok");
      ch.last_declared_queue = m.queue;
      break;
    }
    case mid::channel_close:
      ch.closing = true;
      drop_injections(frame.channel);
      tx_abandon(ch);  // the client's close-ok may wait behind a held commit
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

void Session::begin_delivery(ChannelState& ch, const Frame& frame, Delivery delivery) {
  delivery.channel = frame.channel;
  ch.note_broker_tag(delivery.broker_tag);
  ch.incoming = std::move(delivery);
  ch.incoming_method_frame.assign(frame.raw.begin(), frame.raw.end());
  ch.incoming_route = ChannelState::Route::forward;
  ch.incoming_untracked = false;
  ch.from_broker.phase = ContentState::Phase::awaiting_header;
}

void Session::handle_broker_content(ChannelState& ch, const Frame& frame) {
  ContentState& state = ch.from_broker;
  bool is_header = frame.frame_type() == FrameType::header;
  std::optional<std::uint64_t> size;
  if (is_header) size = amqp::peek_body_size(frame.payload);
  bool in_sequence = is_header ? state.phase == ContentState::Phase::awaiting_header && size
                               : state.phase == ContentState::Phase::awaiting_body &&
                                     frame.payload.size() <= state.remaining;
  if (!in_sequence) {
    protocol_error(Side::broker, reply::unexpected_frame,
                   "UNEXPECTED_FRAME - nackguard got a content frame out of sequence on channel " +
                       std::to_string(frame.channel));
    return;
  }
  if (is_header) {
    state.remaining = *size;
    state.phase = *size == 0 ? ContentState::Phase::idle : ContentState::Phase::awaiting_body;
  } else {
    state.remaining -= frame.payload.size();
    if (state.remaining == 0) state.phase = ContentState::Phase::idle;
  }

  if (ch.incoming) {
    if (is_header) {
      route_delivery_header(ch, frame);
    } else {
      route_delivery_body(ch, frame);
    }
    if (!state.in_progress()) complete_delivery(ch);
  } else {
    // basic.return content: passed through.
    emit(Side::client, frame.raw);
    ch.to_client = state;
  }
  if (!state.in_progress()) {
    if (channels_with_held_ > 0) release_all_held();
    flush_injections(Side::client);
  }
}

void Session::route_delivery_header(ChannelState& ch, const Frame& frame) {
  Delivery& d = *ch.incoming;
  d.header_payload.assign(frame.payload.begin(), frame.payload.end());
  d.body_size = amqp::peek_body_size(frame.payload).value_or(0);
  if (!ch.hasher) ch.hasher = std::make_unique<BodyHasher>();
  ch.hasher->reset();
  if (!d.no_ack && !admit_record(ch, d, options_.body_budget)) {
    // Past the body budget: handed out as it is, and the observer hears nothing of it, so
    // its returns are not counted (a fallback). No record is kept, only a run of tags
    // (ChannelState::note_untracked); past kMaxUntrackedRuns, a record of its tags alone.
    ch.incoming_route = ChannelState::Route::forward;
    emit_delivery(ch, d, ch.incoming_method_frame);
    ch.incoming_method_frame.clear();
    emit(Side::client, frame.raw);
    ch.to_client = ch.from_broker;
    ch.incoming_untracked = ch.note_untracked(d.client_tag, d.broker_tag);
    ChannelState::make_slim(d);
    return;
  }

  bool gated = !d.from_get && (ch.exclusive_client_tag != 0 || !ch.held.empty()) &&
               !observer_->decide_before_holding(d);
  DeliveryPlan plan;
  if (gated) {
    d.held = true;
    plan.action = DeliveryPlan::Action::need_body;
  } else {
    plan = observer_->on_delivery(d);
    d.cookie = plan.cookie;
  }
  if (plan.action == DeliveryPlan::Action::need_body) {
    std::uint64_t frames_size =
        buffered_frames_cost(ch.incoming_method_frame.size() + frame.raw.size(), d.body_size);
    ch.incoming_buffer_reservation = RetainedBody::make(options_.body_budget, frames_size);
    if (ch.incoming_buffer_reservation) {
      ch.incoming_route = ChannelState::Route::buffer;
      ch.incoming_frames = std::move(ch.incoming_method_frame);
      ch.incoming_frames.insert(ch.incoming_frames.end(), frame.raw.begin(), frame.raw.end());
      return;
    }
    // Over the memory budget: hand it out now rather than hold it.
    d.held = false;
    if (gated) {
      plan = observer_->on_delivery(d);
      d.cookie = plan.cookie;
    }
    if (plan.action == DeliveryPlan::Action::need_body) plan = DeliveryPlan{};
  }
  if (plan.retain_body) {
    d.body = RetainedBody::make(options_.body_budget, d.body_size);
    // Within the budget just reserved; without a budget the size is the broker's word only.
    if (d.body && options_.body_budget) d.body->bytes.reserve(d.body_size);
  }
  if (plan.action == DeliveryPlan::Action::withhold) {
    ch.incoming_route = ChannelState::Route::withhold;
    ch.note_owned();
    ch.incoming_method_frame.clear();  // its capacity serves the next delivery
    return;
  }
  ch.incoming_route = ChannelState::Route::forward;
  d.exclusive = plan.exclusive && !d.no_ack;
  emit_delivery(ch, d, ch.incoming_method_frame);
  ch.incoming_method_frame.clear();  // its capacity serves the next delivery
  emit(Side::client, frame.raw);
  ch.to_client = ch.from_broker;
}

void Session::route_delivery_body(ChannelState& ch, const Frame& frame) {
  Delivery& d = *ch.incoming;
  // A retained body is hashed from the retained bytes, if ever asked (BodyHash).
  if (!d.body) ch.hasher->update(frame.payload);
  switch (ch.incoming_route) {
    case ChannelState::Route::forward:
      emit(Side::client, frame.raw);
      ch.to_client = ch.from_broker;
      break;
    case ChannelState::Route::withhold:
      break;
    case ChannelState::Route::buffer:
      ch.incoming_frames.insert(ch.incoming_frames.end(), frame.raw.begin(), frame.raw.end());
      return;
  }
  if (d.body) d.body->bytes.insert(d.body->bytes.end(), frame.payload.begin(), frame.payload.end());
}

void Session::complete_delivery(ChannelState& ch) {
  Delivery d = std::move(*ch.incoming);
  ch.incoming.reset();
  if (d.body && d.body->bytes.size() == d.body_size) {
    d.body_hash.defer_to(d.body);
  } else {
    d.body_hash = ch.hasher ? ch.hasher->digest() : 0;
  }
  d.body_complete = true;
  switch (ch.incoming_route) {
    case ChannelState::Route::forward:
      if (!d.no_ack && !ch.incoming_untracked) ch.add_unacked(std::move(d));
      ch.incoming_untracked = false;
      break;
    case ChannelState::Route::withhold: {
      std::uint64_t tag = d.broker_tag;
      ch.add_withheld(std::move(d));
      if (const Delivery* owned = ch.find_withheld(tag)) observer_->on_withheld(*owned);
      break;
    }
    case ChannelState::Route::buffer: {
      amqp::Bytes frames = std::move(ch.incoming_frames);
      ch.incoming_frames.clear();
      auto reservation = std::move(ch.incoming_buffer_reservation);
      if (d.held) {
        if (ch.held.empty()) ++channels_with_held_;
        ch.note_owned();
        ch.held.push_back({std::move(d), std::move(frames), std::move(reservation)});
        return;
      }
      DeliveryPlan plan = observer_->on_delivery(d);
      d.cookie = plan.cookie;
      dispatch_buffered(ch, std::move(d), std::move(frames), plan);
      break;
    }
  }
}

void Session::emit_delivery(ChannelState& ch, Delivery& d, amqp::Bytes& method_frame) {
  d.client_tag = ch.next_client_tag();
  if (d.client_tag != d.broker_tag) {
    ch.note_owned();
    ByteView payload = ByteView(method_frame).subspan(amqp::kFrameHeaderSize);
    std::size_t at =
        amqp::kFrameHeaderSize +
        delivery_tag_offset(amqp::peek_method_key(payload).value_or(0), d.consumer_tag);
    patch_u64(method_frame, at, d.client_tag);
  }
  if (d.exclusive) ch.exclusive_client_tag = d.client_tag;
  ch.note_handed_out(d.client_tag, d.broker_tag);
  emit(Side::client, method_frame);
}

namespace {
// The method frame at the front of buffered frames, and the body bytes after the header.
struct BufferedParts {
  std::size_t method_size = 0;
  amqp::Bytes body;
};
BufferedParts split_buffered(const amqp::Bytes& frames, bool want_body) {
  BufferedParts parts;
  amqp::FrameDecoder decoder(std::numeric_limits<std::uint32_t>::max());
  std::size_t at = 0;
  int index = 0;
  while (at < frames.size()) {
    amqp::FrameResult r = decoder.decode(ByteView(frames).subspan(at));
    if (r.status != amqp::FrameResult::Status::frame) break;
    if (index == 0) parts.method_size = r.frame.raw.size();
    if (index >= 2 && want_body) {
      parts.body.insert(parts.body.end(), r.frame.payload.begin(), r.frame.payload.end());
    }
    at += r.frame.raw.size();
    ++index;
  }
  return parts;
}
}  // namespace

void Session::dispatch_buffered(ChannelState& ch, Delivery d, amqp::Bytes frames,
                                DeliveryPlan plan) {
  if (plan.action == DeliveryPlan::Action::need_body) plan.action = DeliveryPlan::Action::forward;
  d.held = false;
  BufferedParts parts = split_buffered(frames, plan.retain_body);
  if (plan.retain_body) {
    d.body = RetainedBody::make(options_.body_budget, parts.body.size());
    if (d.body) d.body->bytes = std::move(parts.body);
  }
  if (plan.action == DeliveryPlan::Action::withhold) {
    std::uint64_t tag = d.broker_tag;
    ch.add_withheld(std::move(d));
    if (const Delivery* owned = ch.find_withheld(tag)) observer_->on_withheld(*owned);
    return;
  }
  d.exclusive = plan.exclusive && !d.no_ack;
  amqp::Bytes method(frames.begin(),
                     frames.begin() + static_cast<std::ptrdiff_t>(parts.method_size));
  emit_delivery(ch, d, method);
  emit(Side::client, ByteView(frames).subspan(parts.method_size));
  if (!d.no_ack) ch.add_unacked(std::move(d));
}

void Session::release_held(ChannelState& ch) {
  if (content_in_progress(Side::client)) return;  // retried at the next frame boundary
  while (!ch.held.empty() && ch.exclusive_client_tag == 0) {
    ChannelState::HeldDelivery h = std::move(ch.held.front());
    ch.held.pop_front();
    if (ch.held.empty()) --channels_with_held_;
    DeliveryPlan plan = observer_->on_delivery(h.delivery);
    h.delivery.cookie = plan.cookie;
    dispatch_buffered(ch, std::move(h.delivery), std::move(h.frames), plan);
  }
}

void Session::release_all_held() {
  for (auto& [number, ch] : channels_) {
    if (!ch.held.empty() && ch.exclusive_client_tag == 0) release_held(ch);
  }
}

}  // namespace nackguard::session
