#pragma once
// The content header frame's payload and the 14 basic properties.

#include <cstdint>
#include <optional>
#include <string>

#include "proxy/amqp/bytes.hpp"
#include "proxy/amqp/constants.hpp"
#include "proxy/amqp/table.hpp"

namespace nackguard::amqp {

struct BasicProperties {
  std::optional<std::string> content_type;
  std::optional<std::string> content_encoding;
  std::optional<FieldTable> headers;
  std::optional<std::uint8_t> delivery_mode;
  std::optional<std::uint8_t> priority;
  std::optional<std::string> correlation_id;
  std::optional<std::string> reply_to;
  std::optional<std::string> expiration;
  std::optional<std::string> message_id;
  std::optional<std::uint64_t> timestamp;
  std::optional<std::string> type;
  std::optional<std::string> user_id;
  std::optional<std::string> app_id;
  std::optional<std::string> cluster_id;

  bool operator==(const BasicProperties&) const = default;
};

struct ContentHeader {
  std::uint16_t class_id = 60;
  std::uint16_t weight = 0;
  std::uint64_t body_size = 0;
  BasicProperties properties;

  bool operator==(const ContentHeader&) const = default;
};

enum class HeaderError { none, truncated, bad_flags, bad_table, trailing_bytes };
std::string_view to_string(HeaderError error);

// Decodes a content header frame's payload, replacing what `out` held. Only class 60 (basic) has
// properties; a header of another class is rejected as bad_flags unless its flags are zero.
HeaderError decode_content_header(ByteView payload, ContentHeader& out,
                                  const TableLimits& limits = {});
// How many times decode_content_header ran on this thread: for the tests that check that the
// guard decodes a delivery's content header once per decision.
std::uint64_t content_headers_decoded();
// Reads only the body size, without decoding the properties: the passthrough path needs it
// to find where a content sequence ends.
std::optional<std::uint64_t> peek_body_size(ByteView payload);
// Whether the properties carry a headers table (flag bit 13), read from the flags alone; false
// for a payload too short to have them.
inline bool peek_has_headers(ByteView payload) {
  constexpr std::size_t kFlagsOffset = 12;  // class, weight, body size
  return payload.size() >= kFlagsOffset + 2 && (payload[kFlagsOffset] & 0x20) != 0;
}

[[nodiscard]] bool encode_content_header(ByteWriter& out, const ContentHeader& header);

}  // namespace nackguard::amqp
