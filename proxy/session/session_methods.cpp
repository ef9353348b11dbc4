// The methods of both sides: the connection's (the handshake: handshake.hpp, the tune and tune-ok
// rewritten, the vhost, the broker's version and the client's name kept; the connection's close),
// and the channels': settlements and the delivery tag mapping (written by settlement.hpp),
// consumers (basic_methods.hpp), the deliveries' start, and the broker's content frames (a
// delivery's handed to the delivery router, a basic.return's passed through).

#include "proxy/amqp/method_codec.hpp"
#include "proxy/amqp/method_name.hpp"
#include "proxy/session/ack_timeout.hpp"
#include "proxy/session/basic_methods.hpp"
#include "proxy/session/session.hpp"
#include "proxy/session/settlement.hpp"

namespace nackguard::session {

using amqp::Frame;
using amqp::FrameType;
namespace mid = amqp::mid;
namespace reply = amqp::reply;

void Session::handle_client_connection_method(const Frame& frame, std::uint32_t key) {
  switch (key) {
    case mid::connection_tune_ok: {
      std::optional<amqp::Bytes> to_broker = handshake_.client_tune_ok(frame);
      if (!to_broker) {
        protocol_error(Side::client, reply::frame_error, "FRAME_ERROR - malformed tune-ok");
        return;
      }
      for (auto& side : io_) side.decoder.set_frame_max(handshake_.tuning().frame_max());
      emit(Side::broker, *to_broker);
      return;
    }
    case mid::connection_start_ok:
      // Forwarded as it is (credentials included); only the client's name is kept.
      handshake_.client_start_ok(frame);
      break;
    case mid::connection_open:
      if (!handshake_.client_open(frame)) {
        protocol_error(Side::client, reply::frame_error, "FRAME_ERROR - malformed connection.open");
        return;
      }
      break;
    case mid::connection_close:
      if (phase_ == Phase::open && hold_client_connection_close(frame)) return;
      break;
    case mid::connection_close_ok:
      // The client answers the broker's connection.close: the broker ended it.
      emit(Side::broker, frame.raw);
      end_all_channels(ReturnCause::broker_lost);
      close_both_after_flush();
      return;
    default:
      if (!amqp::is_spec_method(key)) return reject_unknown_method(frame.channel, key);
      break;
  }
  emit(Side::broker, frame.raw);
}

void Session::handle_broker_connection_method(const Frame& frame, std::uint32_t key) {
  switch (key) {
    case mid::connection_start:
      // Forwarded as it is; only the broker's version is kept.
      handshake_.broker_start(frame);
      emit(Side::client, frame.raw);
      return;
    case mid::connection_tune: {
      std::optional<amqp::Bytes> to_client = handshake_.broker_tune(frame);
      if (!to_client) {
        protocol_error(Side::broker, reply::frame_error, "FRAME_ERROR - malformed tune");
        return;
      }
      emit(Side::client, *to_client);
      return;
    }
    case mid::connection_open_ok:
      phase_ = Phase::open;
      emit(Side::client, frame.raw);
      proxy_channel_.configure(reserved_channel(), frame_max());
      observer_->on_open(handshake_.facts(frame_max()));
      return;
    case mid::connection_close:
      // The broker ends the connection: it answers nothing more but its close-ok (no cancel-ok
      // for a crash's cancels, no confirm), and requeues what the client held.
      broker_closing_ = true;
      emit(Side::client, frame.raw);
      return;
    case mid::connection_close_ok:
      // The client's connection.close, answered: the broker side is done; the client's socket
      // is the client's to close, as RabbitMQ leaves it (session_core_end.cpp).
      emit(Side::client, frame.raw);
      end_all_channels(ReturnCause::connection_closed);
      close_broker_await_client();
      return;
    default:
      emit(Side::client, frame.raw);
      return;
  }
}

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
      switch (note_client_basic_method(ch, frame, key)) {
        case BasicNote::malformed:
          return malformed();
        case BasicNote::requeues_all:
          // The broker requeues everything unacked on the channel, the proxy's own included.
          return_all(ch, ReturnCause::recover);
          break;
        case BasicNote::noted:
          break;
      }
      break;
    case tx_mid::select:
    case tx_mid::commit:
    case tx_mid::rollback:
      return tx_.method(ch, frame, key);
    case mid::queue_declare: {
      amqp::QueueDeclare m;
      if (amqp::decode_method(frame.payload, m) != amqp::MethodError::none) return malformed();
      if (m.no_wait) ch.book.last_declared_queue = m.queue;
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
      // In a transaction the settlement is the broker's at the commit (tx_methods.cpp).
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
    amqp::Bytes out;
    append_client_settlement(out, ch,
                             ClientSettlement{frame.channel, kind, tag, multiple, requeue, unknown},
                             settled, forwarded);
    if (!out.empty()) emit(Side::broker, out);
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
      if (!ch.book.pending_gets.empty()) ch.book.pending_gets.pop_front();
      break;
    case mid::basic_return:
      ch.from_broker.phase = ContentState::Phase::awaiting_header;
      ch.to_client.phase = ContentState::Phase::awaiting_header;
      break;
    case mid::basic_consume_ok:
      if (!note_broker_consumer_method(ch, frame, key)) return malformed();
      break;
    case mid::basic_cancel:
      if (!ack_closes_.note_broker_cancel(ch, frame)) return malformed();
      break;
    case mid::basic_cancel_ok:
      if (!note_broker_consumer_method(ch, frame, key)) return malformed();
      // A client that left, or closes the channel, takes no cancel-ok (it discards all but the
      // close-ok): the proxy's cancels are answered to the proxy alone.
      if (ch.cancels_pending == 0) emit(Side::client, frame.raw);
      if (ch.cancels_pending > 0 && --ch.cancels_pending == 0) {
        // The last cancel of a client that left: a close waiting for it may go now
        // (session_core_end.cpp). Last: it may end the connection, and `ch` with it.
        release_held_close(ch);
        release_crash_holds(false);
      }
      return;
    case mid::queue_declare_ok: {
      amqp::QueueDeclareOk m;
      if (amqp::decode_method(frame.payload, m) != amqp::MethodError::none) return malformed();
      ch.book.last_declared_queue = m.queue;
      break;
    }
    case mid::channel_close:
      ch.closing = true;
      ch.held_close.drop();  // the broker ends the channel: the client's close crossed it
      drop_injections(frame.channel);
      tx_.abandon(ch);  // the client's close-ok may wait behind a held commit
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

// ---- a settlement's and a delivery's decoding (the consumers' and gets' bookkeeping:
// basic_methods.hpp). Each is false for a method that does not decode: the caller closes with
// 501. In this file so that the compiler may inline them into the dispatch above.

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

bool Session::start_broker_delivery(ChannelState& ch, const Frame& frame, std::uint32_t key) {
  Delivery d = ch.fresh_delivery();
  if (key == mid::basic_deliver) {
    // Decoded into buffers that served earlier deliveries: no allocation per delivery.
    amqp::BasicDeliver& m = deliver_scratch_;
    if (amqp::decode_method(frame.payload, m) != amqp::MethodError::none) return false;
    if (const Consumer* consumer = ch.book.find(m.consumer_tag)) {
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
    if (!ch.book.pending_gets.empty()) {
      d.queue = ch.book.pending_gets.front().queue;
      d.no_ack = ch.book.pending_gets.front().no_ack;
      ch.book.pending_gets.pop_front();
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

void Session::handle_broker_content(ChannelState& ch, const Frame& frame) {
  ContentState& state = ch.from_broker;
  const bool is_header = frame.frame_type() == FrameType::header;
  if (!state.take(frame)) {
    protocol_error(Side::broker, reply::unexpected_frame,
                   "UNEXPECTED_FRAME - nackguard got a content frame out of sequence on channel " +
                       std::to_string(frame.channel));
    return;
  }

  if (ch.incoming) {
    if (is_header) {
      router_.header(ch, frame);
    } else {
      router_.body(ch, frame);
    }
    if (!state.in_progress()) {
      router_.complete(ch);
      carry_out_router_take_overs();
    }
  } else {
    // basic.return content: passed through.
    emit(Side::client, frame.raw);
    ch.to_client = state;
  }
  if (!state.in_progress()) {
    if (router_.any_held_back()) {
      finish_bookkeeping();  // a release records deliveries too, in tag order
      release_all_held_back();
    }
    flush_injections(Side::client);
  }
}

}  // namespace nackguard::session
