#include "proxy/amqp/method_codec.hpp"
#include "proxy/session/delivery.hpp"

namespace nackguard::session {

void append_settlement(amqp::Bytes& out, std::uint16_t channel, SettleKind kind, std::uint64_t tag,
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

}  // namespace nackguard::session
