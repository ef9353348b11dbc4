#include "proxy/amqp/method_codec.hpp"

namespace nackguard::amqp {

std::string_view to_string(MethodError error) {
  switch (error) {
    case MethodError::none:
      return "ok";
    case MethodError::truncated:
      return "method frame truncated";
    case MethodError::wrong_method:
      return "unexpected method";
    case MethodError::bad_table:
      return "method has a malformed field table";
    case MethodError::trailing_bytes:
      return "method frame has trailing bytes";
  }
  return "unknown";
}

std::optional<std::uint32_t> peek_method_key(ByteView payload) {
  ByteReader in(payload);
  std::uint16_t class_id = in.u16();
  std::uint16_t method_id = in.u16();
  if (!in.ok()) return std::nullopt;
  return method_key(class_id, method_id);
}

void cut_to_short_string(std::string& text) {
  if (text.size() <= 255) return;
  std::size_t keep = 255;
  while (keep > 0 && (static_cast<unsigned char>(text[keep]) & 0xC0) == 0x80) --keep;
  text.resize(keep);
}

bool append_content_header_frame(Bytes& out, std::uint16_t channel, const ContentHeader& header) {
  Bytes payload;
  ByteWriter w(payload);
  if (!encode_content_header(w, header)) return false;
  append_frame(out, FrameType::header, channel, payload);
  return true;
}

}  // namespace nackguard::amqp
