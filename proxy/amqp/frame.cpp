#include "proxy/amqp/frame.hpp"

namespace nackguard::amqp {

HeaderCheck check_protocol_header(ByteView in) {
  std::size_t n = in.size() < kProtocolHeaderSize ? in.size() : kProtocolHeaderSize;
  for (std::size_t i = 0; i < n; ++i) {
    if (in[i] != kProtocolHeader[i]) return HeaderCheck::bad;
  }
  return n == kProtocolHeaderSize ? HeaderCheck::ok : HeaderCheck::need_more;
}

std::string_view to_string(FrameError error) {
  switch (error) {
    case FrameError::none:
      return "ok";
    case FrameError::too_large:
      return "frame larger than the negotiated frame_max";
    case FrameError::bad_end_octet:
      return "frame end octet is not 0xCE";
    case FrameError::unknown_type:
      return "unknown frame type";
    case FrameError::bad_heartbeat:
      return "heartbeat frame with a payload or a channel";
  }
  return "unknown";
}

FrameResult FrameDecoder::decode(ByteView in) const {
  FrameResult result;
  if (in.size() < kFrameHeaderSize) return result;
  ByteReader header(in.first(kFrameHeaderSize));
  std::uint8_t type = header.u8();
  std::uint16_t channel = header.u16();
  std::uint32_t size = header.u32();

  auto fail = [&](FrameError error) {
    result.status = FrameResult::Status::error;
    result.error = error;
    return result;
  };
  if (type != 1 && type != 2 && type != 3 && type != 8) return fail(FrameError::unknown_type);
  // Checked before waiting for the payload, so an oversized frame is refused at its header.
  if (size > frame_max_ || frame_max_ - size < kFrameOverhead) return fail(FrameError::too_large);
  if (type == 8 && (size != 0 || channel != 0)) return fail(FrameError::bad_heartbeat);
  std::size_t total = kFrameOverhead + size;
  if (in.size() < total) return result;
  if (in[total - 1] != kFrameEnd) return fail(FrameError::bad_end_octet);

  result.status = FrameResult::Status::frame;
  result.frame.type = type;
  result.frame.channel = channel;
  result.frame.payload = in.subspan(kFrameHeaderSize, size);
  result.frame.raw = in.first(total);
  return result;
}

void append_frame(Bytes& out, FrameType type, std::uint16_t channel, ByteView payload) {
  ByteWriter w(out);
  w.u8(static_cast<std::uint8_t>(type));
  w.u16(channel);
  w.u32(static_cast<std::uint32_t>(payload.size()));
  w.bytes(payload);
  w.u8(kFrameEnd);
}

void append_heartbeat(Bytes& out) {
  append_frame(out, FrameType::heartbeat, 0, {});
}

}  // namespace nackguard::amqp
