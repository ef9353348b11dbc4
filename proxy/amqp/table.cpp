#include "proxy/amqp/table.hpp"

#include <bit>
#include <limits>

namespace nackguard::amqp {

bool FieldArray::operator==(const FieldArray& other) const {
  return items == other.items;
}
bool FieldTable::operator==(const FieldTable& other) const {
  return entries == other.entries;
}

const FieldValue* FieldTable::find(std::string_view name) const {
  for (const auto& [key, value] : entries) {
    if (key == name) return &value;
  }
  return nullptr;
}

void FieldTable::set(std::string name, FieldValue value) {
  for (auto& [key, existing] : entries) {
    if (key == name) {
      existing = std::move(value);
      return;
    }
  }
  entries.emplace_back(std::move(name), std::move(value));
}

std::optional<std::int64_t> FieldValue::as_int() const {
  return std::visit(
      [](const auto& v) -> std::optional<std::int64_t> {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool>) {
          return std::nullopt;
        } else if constexpr (std::is_same_v<T, std::uint64_t>) {
          if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
            return std::nullopt;
          }
          return static_cast<std::int64_t>(v);
        } else if constexpr (std::is_integral_v<T>) {
          return static_cast<std::int64_t>(v);
        } else {
          return std::nullopt;
        }
      },
      value);
}

std::string_view to_string(TableError error) {
  switch (error) {
    case TableError::none:
      return "ok";
    case TableError::truncated:
      return "field table truncated or length out of bounds";
    case TableError::unknown_type:
      return "unknown field type letter";
    case TableError::too_deep:
      return "field tables nested too deep";
    case TableError::too_many_values:
      return "too many values in field table";
  }
  return "unknown";
}

namespace {

struct DecodeState {
  const TableLimits& limits;
  std::size_t values = 0;
};

TableError decode_table_body(ByteReader& in, FieldTable& out, DecodeState& state,
                             std::size_t depth);
TableError decode_array_body(ByteReader& in, FieldArray& out, DecodeState& state,
                             std::size_t depth);

// A value of fixed size or a string, for `type`; false if `type` is another letter.
bool decode_scalar(char type, ByteReader& in, FieldValue::Storage& value) {
  switch (type) {
    case 't':
      value = in.u8() != 0;
      return true;
    case 'b':
      value = static_cast<std::int8_t>(in.u8());
      return true;
    case 'B':
      value = in.u8();
      return true;
    case 's':
      value = static_cast<std::int16_t>(in.u16());
      return true;
    case 'u':
      value = in.u16();
      return true;
    case 'I':
      value = static_cast<std::int32_t>(in.u32());
      return true;
    case 'i':
      value = in.u32();
      return true;
    case 'l':
      value = static_cast<std::int64_t>(in.u64());
      return true;
    case 'T':
      value = in.u64();
      return true;
    case 'f':
      value = std::bit_cast<float>(in.u32());
      return true;
    case 'd':
      value = std::bit_cast<double>(in.u64());
      return true;
    case 'D': {
      Decimal d;
      d.scale = in.u8();
      d.value = in.u32();
      value = d;
      return true;
    }
    case 'S':
    case 'x':
      value = in.longstr();
      return true;
    case 'V':
      value = std::monostate{};
      return true;
    default:
      return false;
  }
}

// An array or a table, one level deeper than `depth`.
template <typename Nested>
TableError decode_nested(ByteReader& in, FieldValue& out, DecodeState& state, std::size_t depth,
                         TableError (*decode_body)(ByteReader&, Nested&, DecodeState&,
                                                   std::size_t)) {
  if (depth + 1 > state.limits.max_depth) return TableError::too_deep;
  Nested nested;
  if (auto e = decode_body(in, nested, state, depth + 1); e != TableError::none) return e;
  out.value = std::move(nested);
  return in.ok() ? TableError::none : TableError::truncated;
}

TableError decode_value(ByteReader& in, FieldValue& out, DecodeState& state, std::size_t depth) {
  if (++state.values > state.limits.max_values) return TableError::too_many_values;
  out.type = static_cast<char>(in.u8());
  if (decode_scalar(out.type, in, out.value)) {
    return in.ok() ? TableError::none : TableError::truncated;
  }
  if (out.type == 'A') return decode_nested<FieldArray>(in, out, state, depth, decode_array_body);
  if (out.type == 'F') return decode_nested<FieldTable>(in, out, state, depth, decode_table_body);
  // An unknown letter has an unknown length: skipping it would desynchronise the parse.
  if (!in.ok()) return TableError::truncated;
  return TableError::unknown_type;
}

// Reads the 32-bit length and returns a reader over exactly that many bytes.
bool take_sized(ByteReader& in, ByteView& body) {
  std::uint32_t size = in.u32();
  body = in.bytes(size);
  return in.ok();
}

TableError decode_table_body(ByteReader& in, FieldTable& out, DecodeState& state,
                             std::size_t depth) {
  ByteView body;
  if (!take_sized(in, body)) return TableError::truncated;
  ByteReader inner(body);
  while (!inner.at_end()) {
    std::string name = inner.shortstr();
    if (!inner.ok()) return TableError::truncated;
    FieldValue value;
    if (auto e = decode_value(inner, value, state, depth); e != TableError::none) return e;
    out.entries.emplace_back(std::move(name), std::move(value));
  }
  return TableError::none;
}

TableError decode_array_body(ByteReader& in, FieldArray& out, DecodeState& state,
                             std::size_t depth) {
  ByteView body;
  if (!take_sized(in, body)) return TableError::truncated;
  ByteReader inner(body);
  while (!inner.at_end()) {
    FieldValue value;
    if (auto e = decode_value(inner, value, state, depth); e != TableError::none) return e;
    out.items.push_back(std::move(value));
  }
  return TableError::none;
}

bool encode_value(ByteWriter& out, const FieldValue& field);

bool encode_sized(ByteWriter& out, auto&& write_body) {
  std::size_t at = out.size();
  out.u32(0);
  if (!write_body()) return false;
  std::size_t size = out.size() - at - 4;
  if (size > std::numeric_limits<std::uint32_t>::max()) return false;
  out.patch_u32(at, static_cast<std::uint32_t>(size));
  return true;
}

bool encode_array(ByteWriter& out, const FieldArray& array) {
  return encode_sized(out, [&] {
    for (const auto& item : array.items) {
      if (!encode_value(out, item)) return false;
    }
    return true;
  });
}

template <typename T>
const T* holds(const FieldValue& field) {
  return std::get_if<T>(&field.value);
}

// A value of fixed size for `field`'s letter; false if the letter is not one of those, or does
// not match the stored value.
bool encode_fixed(ByteWriter& out, const FieldValue& field) {
  switch (field.type) {
    case 't':
      if (auto v = holds<bool>(field)) return out.u8(*v ? 1 : 0), true;
      break;
    case 'b':
      if (auto v = holds<std::int8_t>(field)) return out.u8(static_cast<std::uint8_t>(*v)), true;
      break;
    case 'B':
      if (auto v = holds<std::uint8_t>(field)) return out.u8(*v), true;
      break;
    case 's':
      if (auto v = holds<std::int16_t>(field)) return out.u16(static_cast<std::uint16_t>(*v)), true;
      break;
    case 'u':
      if (auto v = holds<std::uint16_t>(field)) return out.u16(*v), true;
      break;
    case 'I':
      if (auto v = holds<std::int32_t>(field)) return out.u32(static_cast<std::uint32_t>(*v)), true;
      break;
    case 'i':
      if (auto v = holds<std::uint32_t>(field)) return out.u32(*v), true;
      break;
    case 'l':
      if (auto v = holds<std::int64_t>(field)) return out.u64(static_cast<std::uint64_t>(*v)), true;
      break;
    case 'T':
      if (auto v = holds<std::uint64_t>(field)) return out.u64(*v), true;
      break;
    case 'f':
      if (auto v = holds<float>(field)) return out.u32(std::bit_cast<std::uint32_t>(*v)), true;
      break;
    case 'd':
      if (auto v = holds<double>(field)) return out.u64(std::bit_cast<std::uint64_t>(*v)), true;
      break;
    case 'D':
      if (auto v = holds<Decimal>(field)) {
        out.u8(v->scale);
        out.u32(v->value);
        return true;
      }
      break;
    default:
      break;
  }
  return false;
}

bool encode_value(ByteWriter& out, const FieldValue& field) {
  out.u8(static_cast<std::uint8_t>(field.type));
  switch (field.type) {
    case 'S':
    case 'x':
      if (auto v = holds<std::string>(field)) {
        out.longstr(*v);
        return out.ok();
      }
      return false;
    case 'V':
      return true;
    case 'A':
      if (auto v = holds<FieldArray>(field)) return encode_array(out, *v);
      return false;
    case 'F':
      if (auto v = holds<FieldTable>(field)) return encode_table(out, *v);
      return false;
    default:
      // A fixed-size letter; false for an unknown letter, or one that does not match the
      // stored value.
      return encode_fixed(out, field);
  }
}

}  // namespace

TableError decode_table(ByteReader& in, FieldTable& out, const TableLimits& limits) {
  out.entries.clear();  // a reused table would otherwise keep its old entries
  DecodeState state{limits};
  return decode_table_body(in, out, state, 1);
}

TableError decode_array(ByteReader& in, FieldArray& out, const TableLimits& limits) {
  out.items.clear();
  DecodeState state{limits};
  return decode_array_body(in, out, state, 1);
}

bool encode_table(ByteWriter& out, const FieldTable& table) {
  return encode_sized(out, [&] {
    for (const auto& [name, value] : table.entries) {
      out.shortstr(name);
      if (!out.ok() || !encode_value(out, value)) return false;
    }
    return true;
  });
}

}  // namespace nackguard::amqp
