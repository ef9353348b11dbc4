#pragma once
// Decoding and encoding of method frame payloads, driven by each method's field list.

#include <optional>

#include "proxy/amqp/bytes.hpp"
#include "proxy/amqp/frame.hpp"
#include "proxy/amqp/methods.hpp"
#include "proxy/amqp/properties.hpp"
#include "proxy/amqp/table.hpp"

namespace nackguard::amqp {

enum class MethodError { none, truncated, wrong_method, bad_table, trailing_bytes };
std::string_view to_string(MethodError error);

// The (class, method) key at the start of a method payload, or nullopt if it is too short.
std::optional<std::uint32_t> peek_method_key(ByteView payload);

namespace detail {

class FieldDecoder {
 public:
  FieldDecoder(ByteReader& in, const TableLimits& limits) : in_(in), limits_(limits) {}
  void u8(std::uint8_t& v) { v = in_.u8(); }
  void u16(std::uint16_t& v) { v = in_.u16(); }
  void u32(std::uint32_t& v) { v = in_.u32(); }
  void u64(std::uint64_t& v) { v = in_.u64(); }
  // Assigned in place: a string decoded into again keeps its buffer.
  void shortstr(std::string& v) { v.assign(in_.shortstr_view()); }
  void longstr(std::string& v) { v.assign(in_.longstr_view()); }
  void table(FieldTable& v) {
    if (table_error_ == TableError::none && in_.ok()) table_error_ = decode_table(in_, v, limits_);
  }
  template <typename... B>
  void bits(B&... flags) {
    std::uint8_t octet = in_.u8();
    int bit = 0;
    ((flags = ((octet >> bit++) & 1) != 0), ...);
  }
  TableError table_error() const { return table_error_; }

 private:
  ByteReader& in_;
  const TableLimits& limits_;
  TableError table_error_ = TableError::none;
};

class FieldEncoder {
 public:
  explicit FieldEncoder(ByteWriter& out) : out_(out) {}
  void u8(std::uint8_t v) { out_.u8(v); }
  void u16(std::uint16_t v) { out_.u16(v); }
  void u32(std::uint32_t v) { out_.u32(v); }
  void u64(std::uint64_t v) { out_.u64(v); }
  void shortstr(const std::string& v) { out_.shortstr(v); }
  void longstr(const std::string& v) { out_.longstr(v); }
  void table(const FieldTable& v) {
    if (!encode_table(out_, v)) out_.fail();
  }
  template <typename... B>
  void bits(const B&... flags) {
    std::uint8_t octet = 0;
    int bit = 0;
    ((octet |= static_cast<std::uint8_t>((flags ? 1 : 0) << bit++)), ...);
    out_.u8(octet);
  }

 private:
  ByteWriter& out_;
};

// For methods of numbers and bits only: a string or a table does not compile here.
class FixedFieldEncoder : public FieldEncoder {
 public:
  using FieldEncoder::FieldEncoder;
  void shortstr(const std::string&) = delete;
  void longstr(const std::string&) = delete;
  void table(const FieldTable&) = delete;
};

// Appends the method's class and method ids, then its fields through an Encoder
// (FieldEncoder, or FixedFieldEncoder for methods that always encode); false if a string or
// table does not fit its length prefix.
template <typename Encoder, typename M>
bool encode_method_with(Bytes& out, const M& method) {
  ByteWriter w(out);
  w.u16(static_cast<std::uint16_t>(M::kKey >> 16));
  w.u16(static_cast<std::uint16_t>(M::kKey & 0xFFFF));
  Encoder encoder(w);
  M::fields(method, encoder);
  return w.ok();
}

}  // namespace detail

// Decodes a whole method payload (class and method ids included) into `out`.
template <typename M>
MethodError decode_method(ByteView payload, M& out, const TableLimits& limits = {}) {
  ByteReader in(payload);
  std::uint16_t class_id = in.u16();
  std::uint16_t method_id = in.u16();
  if (!in.ok()) return MethodError::truncated;
  if (method_key(class_id, method_id) != M::kKey) return MethodError::wrong_method;
  detail::FieldDecoder decoder(in, limits);
  M::fields(out, decoder);
  if (decoder.table_error() == TableError::truncated) return MethodError::truncated;
  if (decoder.table_error() != TableError::none) return MethodError::bad_table;
  if (!in.ok()) return MethodError::truncated;
  if (!in.at_end()) return MethodError::trailing_bytes;
  return MethodError::none;
}

// Encodes a method payload; false if a string or table does not fit its length prefix.
template <typename M>
[[nodiscard]] bool encode_method(Bytes& out, const M& method) {
  return detail::encode_method_with<detail::FieldEncoder>(out, method);
}

// Appends a whole method frame on `channel`; on false nothing is appended.
template <typename M>
[[nodiscard]] bool append_method_frame(Bytes& out, std::uint16_t channel, const M& method) {
  Bytes payload;
  if (!encode_method(payload, method)) return false;
  append_frame(out, FrameType::method, channel, payload);
  return true;
}

// Appends a method frame of numbers and bits only (basic.ack, connection.tune, close-ok...),
// which always encodes. A method with a string or table field does not compile here: use
// append_method_frame and handle its failure.
template <typename M>
void append_fixed_method_frame(Bytes& out, std::uint16_t channel, const M& method) {
  Bytes payload;
  detail::encode_method_with<detail::FixedFieldEncoder>(payload, method);
  append_frame(out, FrameType::method, channel, payload);
}

// Cuts `text` to at most 255 bytes without splitting a UTF-8 character.
void cut_to_short_string(std::string& text);

// Appends connection.close or channel.close (M), its reply text cut to 255 bytes at a UTF-8
// character boundary, so that it always encodes.
template <typename M>
void append_close_frame(Bytes& out, std::uint16_t channel, M close) {
  static_assert(M::kKey == mid::connection_close || M::kKey == mid::channel_close);
  cut_to_short_string(close.reply_text);
  Bytes payload;
  detail::encode_method_with<detail::FieldEncoder>(payload, close);
  append_frame(out, FrameType::method, channel, payload);
}

// Appends a content header frame; on false nothing is appended.
[[nodiscard]] bool append_content_header_frame(Bytes& out, std::uint16_t channel,
                                               const ContentHeader& header);

}  // namespace nackguard::amqp
