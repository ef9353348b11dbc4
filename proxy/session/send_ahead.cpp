#include "proxy/session/send_ahead.hpp"

#include "proxy/amqp/constants.hpp"
#include "proxy/amqp/method_codec.hpp"
#include "proxy/amqp/properties.hpp"

namespace nackguard::session {

using amqp::FrameResult;
using amqp::FrameType;

std::optional<LoneDelivery> lone_delivery(const amqp::FrameDecoder& decoder, amqp::ByteView data,
                                          std::optional<std::uint16_t> reserved) {
  FrameResult method = decoder.decode(data);
  if (method.status != FrameResult::Status::frame ||
      method.frame.frame_type() != FrameType::method || method.frame.channel == 0 ||
      method.frame.channel == reserved ||
      amqp::peek_method_key(method.frame.payload) != amqp::mid::basic_deliver) {
    return std::nullopt;
  }
  // The frames first, cheaply: under load a read holds many, and is no lone delivery.
  const std::uint16_t number = method.frame.channel;
  std::size_t at = method.frame.raw.size();
  FrameResult header = decoder.decode(data.subspan(at));
  if (header.status != FrameResult::Status::frame ||
      header.frame.frame_type() != FrameType::header || header.frame.channel != number ||
      amqp::peek_has_headers(header.frame.payload)) {
    return std::nullopt;
  }
  std::optional<std::uint64_t> body_size = amqp::peek_body_size(header.frame.payload);
  if (!body_size) return std::nullopt;
  at += header.frame.raw.size();
  std::uint64_t remaining = *body_size;
  while (remaining > 0) {
    FrameResult body = decoder.decode(data.subspan(at));
    if (body.status != FrameResult::Status::frame || body.frame.frame_type() != FrameType::body ||
        body.frame.channel != number || body.frame.payload.size() > remaining) {
      return std::nullopt;
    }
    remaining -= body.frame.payload.size();
    at += body.frame.raw.size();
  }
  if (at != data.size()) return std::nullopt;
  return LoneDelivery{method.frame, at};
}

}  // namespace nackguard::session
