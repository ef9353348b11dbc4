#pragma once
// Byte-spelling helpers for the codec tests: expected wire bytes are written as hex, with
// spaces wherever they help the reader, and printed as hex when a comparison fails. And a
// content header with all 14 properties set. No gtest: the session fuzz target includes it
// (through tests/unit/session/frame_builders.hpp).

#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>

#include "proxy/amqp/bytes.hpp"
#include "proxy/amqp/properties.hpp"

namespace nackguard::amqp::test {

// "00 3c 00 50" -> {0x00, 0x3c, 0x00, 0x50}. Whitespace is ignored; anything else that is
// not a hex digit is a mistake in the test and throws.
inline Bytes hex(std::string_view text) {
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    throw std::invalid_argument("hex(): bad digit in test data");
  };
  Bytes out;
  int high = -1;
  for (char c : text) {
    if (c == ' ' || c == '\n' || c == '\t') continue;
    if (high < 0) {
      high = nibble(c);
    } else {
      out.push_back(static_cast<std::uint8_t>(high << 4 | nibble(c)));
      high = -1;
    }
  }
  if (high >= 0) throw std::invalid_argument("hex(): odd number of digits in test data");
  return out;
}

// The bytes of an ASCII string, without a length prefix.
inline Bytes ascii(std::string_view text) {
  auto view = as_bytes(text);
  return {view.begin(), view.end()};
}

// Concatenation: cat(hex("01"), ascii("ab"), ...).
inline Bytes cat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const auto& part : parts) out.insert(out.end(), part.begin(), part.end());
  return out;
}

inline Bytes u32_be(std::uint32_t v) {
  return {static_cast<std::uint8_t>(v >> 24), static_cast<std::uint8_t>(v >> 16),
          static_cast<std::uint8_t>(v >> 8), static_cast<std::uint8_t>(v)};
}

// A value prefixed with its 32-bit length, as a table, array or long string is on the wire.
inline Bytes sized(const Bytes& body) {
  return cat({u32_be(static_cast<std::uint32_t>(body.size())), body});
}

inline std::string to_hex(ByteView bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (i != 0) out += ' ';
    out += kDigits[bytes[i] >> 4];
    out += kDigits[bytes[i] & 0xF];
  }
  return out;
}

// Wraps bytes for gtest so that a failed EXPECT_EQ prints hex instead of a list of integers.
struct HexBytes {
  Bytes bytes;
  bool operator==(const HexBytes&) const = default;
};
inline HexBytes as_hex(ByteView bytes) {
  return {Bytes(bytes.begin(), bytes.end())};
}
inline void PrintTo(const HexBytes& value, std::ostream* os) {
  *os << to_hex(value.bytes);
}

// A basic content header with every property set, `headers` among them.
inline ContentHeader every_property(FieldTable headers, std::uint64_t body_size) {
  ContentHeader header;
  header.body_size = body_size;
  BasicProperties& p = header.properties;
  p.content_type = "application/json";
  p.content_encoding = "gzip";
  p.headers = std::move(headers);
  p.delivery_mode = 2;
  p.priority = 4;
  p.correlation_id = "corr";
  p.reply_to = "replies";
  p.expiration = "60000";
  p.message_id = "m-1";
  p.timestamp = 1700000000;
  p.type = "order.created";
  p.user_id = "guest";
  p.app_id = "shop";
  p.cluster_id = "c";
  return header;
}

}  // namespace nackguard::amqp::test
