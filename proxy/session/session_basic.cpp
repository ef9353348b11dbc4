// The basic-class methods the session keeps books on, besides settlements: which consumer or
// get a delivery belongs to (its queue, its no_ack), recovers, and the start of a delivery.
// Each returns false for a method that does not decode: the caller closes with 501.

#include "proxy/amqp/method_codec.hpp"
#include "proxy/session/session.hpp"

namespace nackguard::session {

using amqp::Frame;
namespace mid = amqp::mid;

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
  begin_delivery(ch, frame, std::move(d));
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
