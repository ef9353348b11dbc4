#include "proxy/guard/raw_properties.hpp"

#include <algorithm>

namespace nackguard::guard {

namespace {

constexpr std::size_t kFlagsAt = 12;  // class, weight, body size
constexpr std::uint16_t kContentType = 1u << 15;
constexpr std::uint16_t kContentEncoding = 1u << 14;
constexpr std::uint16_t kHeaders = 1u << 13;

// Bytes of a field value after its type letter, for the fixed-size letters; -1 for the
// length-prefixed ones (S x A F), -2 for an unknown letter.
int fixed_size(std::uint8_t type) {
  switch (type) {
    case 't':
    case 'b':
    case 'B':
      return 1;
    case 's':
    case 'u':
      return 2;
    case 'I':
    case 'i':
    case 'f':
      return 4;
    case 'D':
      return 5;
    case 'l':
    case 'T':
    case 'd':
      return 8;
    case 'V':
      return 0;
    case 'S':
    case 'x':
    case 'A':
    case 'F':
      return -1;
    default:
      return -2;
  }
}

// Walks the top level of a table's entries (without its length prefix) at `base` in the
// payload, skipping nested values by their length prefixes: no recursion, whatever the depth.
void walk_entries(amqp::ByteView table, std::size_t base, RawProperties& out) {
  const amqp::TableLimits limits;
  amqp::FieldTable decoded;
  amqp::ByteReader in(table);
  out.entries_known = true;
  while (!in.at_end()) {
    const std::size_t at = in.position();
    std::string name = in.shortstr();
    const int size = fixed_size(in.u8());
    if (size == -2 || out.entries.size() >= limits.max_values) {
      out.entries_known = false;
      break;
    }
    in.bytes(size >= 0 ? static_cast<std::size_t>(size) : in.u32());
    if (!in.ok()) {
      out.entries_known = false;
      break;
    }
    const amqp::ByteView entry = table.subspan(at, in.position() - at);
    // Decoded alone, so that one entry past the codec's limits does not hide the others.
    amqp::Bytes alone;
    amqp::ByteWriter w(alone);
    w.u32(static_cast<std::uint32_t>(entry.size()));
    w.bytes(entry);
    amqp::ByteReader one(alone);
    amqp::FieldTable value;
    if (amqp::decode_table(one, value, limits) == amqp::TableError::none &&
        value.entries.size() == 1) {
      decoded.entries.push_back(std::move(value.entries.front()));
    }
    out.entries.push_back({std::move(name), base + at, base + in.position()});
  }
  if (!out.entries_known) out.entries.clear();
  out.header.properties.headers = std::move(decoded);
}

bool encode_entry(amqp::Bytes& out, const std::string& name, const amqp::FieldValue& value) {
  amqp::FieldTable one;
  one.entries.emplace_back(name, value);
  amqp::Bytes encoded;
  amqp::ByteWriter w(encoded);
  if (!amqp::encode_table(w, one)) return false;
  out.insert(out.end(), encoded.begin() + 4, encoded.end());  // without the length prefix
  return true;
}

}  // namespace

bool decode_properties(amqp::ByteView payload, RawProperties& out) {
  out = RawProperties{};
  const amqp::HeaderError e = amqp::decode_content_header(payload, out.header);
  if (e == amqp::HeaderError::none) return true;
  if (e != amqp::HeaderError::bad_table) return false;

  // The table is refused, not truncated: it has a sound length prefix. Skip it by that length
  // and decode everything else with the codec, from the same bytes without the table.
  amqp::ByteReader in(payload);
  in.bytes(kFlagsAt);
  const std::uint16_t flags = in.u16();
  if (!(flags & kHeaders)) return false;
  if (flags & kContentType) in.skip_shortstr();
  if (flags & kContentEncoding) in.skip_shortstr();
  out.table_at = in.position();
  const amqp::ByteView table = in.bytes(in.u32());
  out.table_end = in.position();
  if (!in.ok()) return false;

  amqp::Bytes rest(payload.begin(), payload.begin() + static_cast<std::ptrdiff_t>(out.table_at));
  rest[kFlagsAt] = static_cast<std::uint8_t>(rest[kFlagsAt] & ~(kHeaders >> 8));
  rest.insert(rest.end(), payload.begin() + static_cast<std::ptrdiff_t>(out.table_end),
              payload.end());
  if (amqp::decode_content_header(rest, out.header) != amqp::HeaderError::none) return false;
  out.opaque = true;
  walk_entries(table, out.table_at + 4, out);
  return true;
}

void apply_edits(amqp::FieldTable& table, const std::vector<HeaderEdit>& edits) {
  for (const HeaderEdit& edit : edits) {
    if (edit.remove) {
      std::erase_if(table.entries, [&](const auto& entry) { return entry.first == edit.name; });
      continue;
    }
    if (edit.only_if_absent && table.find(edit.name)) continue;
    table.set(edit.name, edit.value);
  }
}

bool copy_properties(amqp::ByteView payload, const RawProperties& props,
                     const std::vector<HeaderEdit>& edits, amqp::Bytes& out) {
  out.assign(payload.begin() + kFlagsAt,
             payload.begin() + static_cast<std::ptrdiff_t>(props.table_at));
  if (!props.entries_known) {
    out.insert(out.end(), payload.begin() + static_cast<std::ptrdiff_t>(props.table_at),
               payload.end());
    return true;
  }
  auto present = [&](const std::string& name) {
    return std::any_of(props.entries.begin(), props.entries.end(),
                       [&](const RawProperties::Entry& e) { return e.name == name; });
  };
  auto replaced = [&](const std::string& name) {
    return std::any_of(edits.begin(), edits.end(), [&](const HeaderEdit& edit) {
      return !edit.only_if_absent && edit.name == name;
    });
  };
  amqp::Bytes table;
  for (const RawProperties::Entry& e : props.entries) {
    if (replaced(e.name)) continue;
    table.insert(table.end(), payload.begin() + static_cast<std::ptrdiff_t>(e.at),
                 payload.begin() + static_cast<std::ptrdiff_t>(e.end));
  }
  for (const HeaderEdit& edit : edits) {
    if (edit.remove || (edit.only_if_absent && present(edit.name))) continue;
    if (!encode_entry(table, edit.name, edit.value)) return false;
  }
  if (table.size() > 0xFFFFFFFFu) return false;
  amqp::ByteWriter w(out);
  w.u32(static_cast<std::uint32_t>(table.size()));
  w.bytes(table);
  out.insert(out.end(), payload.begin() + static_cast<std::ptrdiff_t>(props.table_end),
             payload.end());
  return true;
}

}  // namespace nackguard::guard
