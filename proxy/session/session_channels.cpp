// Channel-level frames: consumers, deliveries, settlements and the delivery tag mapping.

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

void append_settle(amqp::Bytes& out, std::uint16_t channel, SettleKind kind, std::uint64_t tag,
                   bool multiple, bool requeue) {
  switch (kind) {
    case SettleKind::ack:
      amqp::append_method_frame(out, channel, amqp::BasicAck{tag, multiple});
      break;
    case SettleKind::nack:
      amqp::append_method_frame(out, channel, amqp::BasicNack{tag, multiple, requeue});
      break;
    case SettleKind::reject:
      amqp::append_method_frame(out, channel, amqp::BasicReject{tag, requeue});
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
      // The consumer's deliveries in flight still arrive until cancel-ok; forget it then.
      if (m.no_wait) ch.consumers.erase(m.consumer_tag);
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
      ByteView payload = frame.payload;
      // recover-async has the same single bit; decode it under recover's key.
      amqp::Bytes copy(payload.begin(), payload.end());
      if (key == mid::basic_recover_async && copy.size() >= 4) copy[3] = 110;
      if (amqp::decode_method(copy, m) != amqp::MethodError::none)
        return malformed("basic.recover");
      if (m.requeue) {
        for (const Delivery& d : ch.take_all()) returned(d, ReturnCause::recover);
      }
      break;
    }
    case mid::queue_declare: {
      amqp::QueueDeclare m;
      if (amqp::decode_method(frame.payload, m) != amqp::MethodError::none)
        return malformed("queue.declare");
      if (m.no_wait) ch.last_declared_queue = m.queue;
      break;
    }
    case mid::channel_close:
      ch.closing = true;
      break;
    case mid::channel_close_ok:
      // The client acknowledges the broker's channel.close: the channel is gone.
      emit(Side::broker, frame.raw);
      end_channel(frame.channel, ReturnCause::channel_closed);
      flush_injections(Side::broker);
      return;
    default:
      break;
  }
  emit(Side::broker, frame.raw);
}

void Session::settle_from_client(ChannelState& ch, const Frame& frame, SettleKind kind,
                                 std::uint64_t tag, bool multiple, bool requeue) {
  std::vector<Delivery> settled = ch.take_settled(tag, multiple);
  for (const Delivery& d : settled) {
    observer_->on_settled(d, kind, requeue);
    if (kind != SettleKind::ack && requeue) {
      returned(d, kind == SettleKind::nack ? ReturnCause::nack : ReturnCause::reject);
    }
  }
  if (ch.tags_identical()) {
    emit(Side::broker, frame.raw);
    return;
  }
  amqp::Bytes out;
  if (settled.empty()) {
    // Nothing of the client's is outstanding: "all" settles nothing; an unknown tag must still
    // fail at the broker, and must not name a delivery the proxy withheld.
    if (multiple && tag == 0) return;
    append_settle(out, frame.channel, kind, kUnknownTagBit | tag, multiple, requeue);
  } else if (!multiple) {
    append_settle(out, frame.channel, kind, settled.front().broker_tag, false, requeue);
  } else if (!ch.withheld_at_or_below(settled.back().broker_tag)) {
    append_settle(out, frame.channel, kind, settled.back().broker_tag, true, requeue);
  } else {
    // A multiple settlement would take the proxy's withheld deliveries with it: expand.
    for (const Delivery& d : settled)
      append_settle(out, frame.channel, kind, d.broker_tag, false, requeue);
  }
  emit(Side::broker, out);
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
      auto consumer = ch.consumers.find(m.consumer_tag);
      if (consumer != ch.consumers.end()) {
        d.queue = consumer->second.queue;
        d.no_ack = consumer->second.no_ack;
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
      ch.consumers.erase(tag);
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

  bool forward = true;
  if (ch.incoming && is_header) {
    Delivery& d = *ch.incoming;
    d.header_payload.assign(frame.payload.begin(), frame.payload.end());
    d.body_size = *size;
    if (observer_->on_delivery(d) == Verdict::withhold) {
      d.withheld = true;
      ch.add_withheld(d);
      forward = false;
    } else {
      d.client_tag = ch.next_client_tag();
      if (d.client_tag != d.broker_tag) {
        std::size_t at = amqp::kFrameHeaderSize +
                         delivery_tag_offset(
                             amqp::peek_method_key(
                                 ByteView(ch.incoming_method_frame).subspan(amqp::kFrameHeaderSize))
                                 .value_or(0),
                             d.consumer_tag);
        patch_u64(ch.incoming_method_frame, at, d.client_tag);
      }
      emit(Side::client, ch.incoming_method_frame);
      if (!d.no_ack) ch.add_unacked(d);
    }
    amqp::Bytes().swap(ch.incoming_method_frame);
  } else if (ch.incoming && ch.incoming->withheld) {
    observer_->on_withheld_body(*ch.incoming, frame.payload);
    forward = false;
  }
  if (forward) {
    emit(Side::client, frame.raw);
    ch.to_client = state;
  }
  if (!state.in_progress()) {
    ch.incoming.reset();
    flush_injections(Side::client);
  }
}

}  // namespace nackguard::session
