#include "proxy/amqp/properties.hpp"

namespace nackguard::amqp {

namespace {
// Property flag bits, most significant first, in the order the properties are encoded.
constexpr std::uint16_t kContentType = 1u << 15;
constexpr std::uint16_t kContentEncoding = 1u << 14;
constexpr std::uint16_t kHeaders = 1u << 13;
constexpr std::uint16_t kDeliveryMode = 1u << 12;
constexpr std::uint16_t kPriority = 1u << 11;
constexpr std::uint16_t kCorrelationId = 1u << 10;
constexpr std::uint16_t kReplyTo = 1u << 9;
constexpr std::uint16_t kExpiration = 1u << 8;
constexpr std::uint16_t kMessageId = 1u << 7;
constexpr std::uint16_t kTimestamp = 1u << 6;
constexpr std::uint16_t kType = 1u << 5;
constexpr std::uint16_t kUserId = 1u << 4;
constexpr std::uint16_t kAppId = 1u << 3;
constexpr std::uint16_t kClusterId = 1u << 2;
constexpr std::uint16_t kContinuation = 1u;
constexpr std::uint16_t kUnusedBits = 1u << 1;

void read_shortstr(ByteReader& in, std::uint16_t flags, std::uint16_t bit,
                   std::optional<std::string>& out) {
  if (flags & bit) out = in.shortstr();
}

void write_shortstr(ByteWriter& out, const std::optional<std::string>& value) {
  if (value) out.shortstr(*value);
}
}  // namespace

std::string_view to_string(HeaderError error) {
  switch (error) {
    case HeaderError::none:
      return "ok";
    case HeaderError::truncated:
      return "content header truncated";
    case HeaderError::bad_flags:
      return "content header has unknown property flags";
    case HeaderError::bad_table:
      return "content header has a malformed headers table";
    case HeaderError::trailing_bytes:
      return "content header has trailing bytes";
  }
  return "unknown";
}

std::optional<std::uint64_t> peek_body_size(ByteView payload) {
  ByteReader in(payload);
  in.u16();
  in.u16();
  std::uint64_t size = in.u64();
  if (!in.ok()) return std::nullopt;
  return size;
}

namespace {
thread_local std::uint64_t headers_decoded = 0;
}  // namespace

std::uint64_t content_headers_decoded() {
  return headers_decoded;
}

HeaderError decode_content_header(ByteView payload, ContentHeader& out, const TableLimits& limits) {
  ++headers_decoded;
  out = ContentHeader{};  // a reused header would otherwise keep properties this one lacks
  ByteReader in(payload);
  out.class_id = in.u16();
  out.weight = in.u16();
  out.body_size = in.u64();
  std::uint16_t flags = in.u16();
  if (!in.ok()) return HeaderError::truncated;
  if ((flags & (kContinuation | kUnusedBits)) != 0) return HeaderError::bad_flags;
  if (out.class_id != kClassBasic && flags != 0) return HeaderError::bad_flags;

  BasicProperties& p = out.properties;
  read_shortstr(in, flags, kContentType, p.content_type);
  read_shortstr(in, flags, kContentEncoding, p.content_encoding);
  if (flags & kHeaders) {
    FieldTable table;
    TableError e = decode_table(in, table, limits);
    if (e == TableError::truncated) return HeaderError::truncated;
    if (e != TableError::none) return HeaderError::bad_table;
    p.headers = std::move(table);
  }
  if (flags & kDeliveryMode) p.delivery_mode = in.u8();
  if (flags & kPriority) p.priority = in.u8();
  read_shortstr(in, flags, kCorrelationId, p.correlation_id);
  read_shortstr(in, flags, kReplyTo, p.reply_to);
  read_shortstr(in, flags, kExpiration, p.expiration);
  read_shortstr(in, flags, kMessageId, p.message_id);
  if (flags & kTimestamp) p.timestamp = in.u64();
  read_shortstr(in, flags, kType, p.type);
  read_shortstr(in, flags, kUserId, p.user_id);
  read_shortstr(in, flags, kAppId, p.app_id);
  read_shortstr(in, flags, kClusterId, p.cluster_id);
  if (!in.ok()) return HeaderError::truncated;
  if (!in.at_end()) return HeaderError::trailing_bytes;
  return HeaderError::none;
}

bool encode_content_header(ByteWriter& out, const ContentHeader& header) {
  const BasicProperties& p = header.properties;
  std::uint16_t flags = 0;
  if (p.content_type) flags |= kContentType;
  if (p.content_encoding) flags |= kContentEncoding;
  if (p.headers) flags |= kHeaders;
  if (p.delivery_mode) flags |= kDeliveryMode;
  if (p.priority) flags |= kPriority;
  if (p.correlation_id) flags |= kCorrelationId;
  if (p.reply_to) flags |= kReplyTo;
  if (p.expiration) flags |= kExpiration;
  if (p.message_id) flags |= kMessageId;
  if (p.timestamp) flags |= kTimestamp;
  if (p.type) flags |= kType;
  if (p.user_id) flags |= kUserId;
  if (p.app_id) flags |= kAppId;
  if (p.cluster_id) flags |= kClusterId;

  out.u16(header.class_id);
  out.u16(header.weight);
  out.u64(header.body_size);
  out.u16(flags);
  write_shortstr(out, p.content_type);
  write_shortstr(out, p.content_encoding);
  if (p.headers && !encode_table(out, *p.headers)) return false;
  if (p.delivery_mode) out.u8(*p.delivery_mode);
  if (p.priority) out.u8(*p.priority);
  write_shortstr(out, p.correlation_id);
  write_shortstr(out, p.reply_to);
  write_shortstr(out, p.expiration);
  write_shortstr(out, p.message_id);
  if (p.timestamp) out.u64(*p.timestamp);
  write_shortstr(out, p.type);
  write_shortstr(out, p.user_id);
  write_shortstr(out, p.app_id);
  write_shortstr(out, p.cluster_id);
  return out.ok();
}

}  // namespace nackguard::amqp
