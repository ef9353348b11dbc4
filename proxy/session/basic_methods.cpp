// The channel's consumers and gets, kept from the basic-class methods that start and end them
// (basic_methods.hpp).

#include "proxy/session/basic_methods.hpp"

#include "proxy/amqp/method_codec.hpp"

namespace nackguard::session {

using amqp::Frame;
namespace mid = amqp::mid;

BasicNote note_client_basic_method(ChannelState& ch, const Frame& frame, std::uint32_t key) {
  switch (key) {
    case mid::basic_consume: {
      amqp::BasicConsume m;
      if (amqp::decode_method(frame.payload, m) != amqp::MethodError::none)
        return BasicNote::malformed;
      std::string queue = m.queue.empty() ? ch.book.last_declared_queue : m.queue;
      if (m.no_wait) {
        ch.book.consumers[m.consumer_tag] = Consumer{queue, m.no_ack};
      } else {
        ch.book.pending_consumes.push_back(PendingConsume{queue, m.consumer_tag, m.no_ack});
      }
      return BasicNote::noted;
    }
    case mid::basic_cancel: {
      amqp::BasicCancel m;
      if (amqp::decode_method(frame.payload, m) != amqp::MethodError::none)
        return BasicNote::malformed;
      // The consumer's deliveries in flight still arrive until cancel-ok; forget it then, or
      // with no-wait keep it among the recently cancelled.
      if (m.no_wait) ch.book.forget(m.consumer_tag);
      return BasicNote::noted;
    }
    case mid::basic_get: {
      amqp::BasicGet m;
      if (amqp::decode_method(frame.payload, m) != amqp::MethodError::none)
        return BasicNote::malformed;
      ch.book.pending_gets.push_back(
          PendingGet{m.queue.empty() ? ch.book.last_declared_queue : m.queue, m.no_ack});
      return BasicNote::noted;
    }
    default: {  // basic.recover, basic.recover-async
      amqp::BasicRecover m;
      amqp::BasicRecoverAsync async;
      bool ok = key == mid::basic_recover
                    ? amqp::decode_method(frame.payload, m) == amqp::MethodError::none
                    : amqp::decode_method(frame.payload, async) == amqp::MethodError::none;
      if (!ok) return BasicNote::malformed;
      return (key == mid::basic_recover ? m.requeue : async.requeue) ? BasicNote::requeues_all
                                                                     : BasicNote::noted;
    }
  }
}

bool note_broker_consumer_method(ChannelState& ch, const Frame& frame, std::uint32_t key) {
  if (key == mid::basic_consume_ok) {
    amqp::BasicConsumeOk m;
    if (amqp::decode_method(frame.payload, m) != amqp::MethodError::none) return false;
    Consumer consumer;
    if (!ch.book.pending_consumes.empty()) {
      consumer.queue = ch.book.pending_consumes.front().queue;
      consumer.no_ack = ch.book.pending_consumes.front().no_ack;
      ch.book.pending_consumes.pop_front();
    }
    ch.book.consumers[m.consumer_tag] = std::move(consumer);
    return true;
  }
  // basic.cancel or cancel-ok: the same fields either way; a broker-sent cancel has a no-wait
  // bit after the tag.
  amqp::ByteReader in(frame.payload.subspan(4));
  std::string tag = in.shortstr();
  if (!in.ok()) return false;
  ch.book.forget(tag);
  return true;
}

}  // namespace nackguard::session
