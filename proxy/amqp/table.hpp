#pragma once
// Field tables and arrays with RabbitMQ's type letters (t b B s u I i l f d D S A T F V x).
// The type letter of every value is kept, so a table decoded and encoded again is the same bytes,
// except a 't' octet other than 0 or 1: it reads as true (as RabbitMQ reads it) and writes as 1.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "proxy/amqp/bytes.hpp"

namespace nackguard::amqp {

struct FieldValue;

struct Decimal {
  std::uint8_t scale = 0;
  std::uint32_t value = 0;
  bool operator==(const Decimal&) const = default;
};

struct FieldArray {
  std::vector<FieldValue> items;
  bool operator==(const FieldArray&) const;
};

struct FieldTable {
  std::vector<std::pair<std::string, FieldValue>> entries;

  const FieldValue* find(std::string_view name) const;
  // Replaces the value of `name`, or appends it.
  void set(std::string name, FieldValue value);
  bool operator==(const FieldTable&) const;
};

struct FieldValue {
  // Letter-to-alternative: V monostate; t bool; b int8; B uint8; s int16; u uint16; I int32;
  // i uint32; l int64; T uint64 (timestamp); f float; d double; D Decimal; S and x string;
  // A FieldArray; F FieldTable.
  using Storage =
      std::variant<std::monostate, bool, std::int8_t, std::uint8_t, std::int16_t, std::uint16_t,
                   std::int32_t, std::uint32_t, std::int64_t, std::uint64_t, float, double, Decimal,
                   std::string, FieldArray, FieldTable>;
  char type = 'V';
  Storage value;

  static FieldValue boolean(bool v) { return {'t', v}; }
  static FieldValue i8(std::int8_t v) { return {'b', v}; }
  static FieldValue u8(std::uint8_t v) { return {'B', v}; }
  static FieldValue i16(std::int16_t v) { return {'s', v}; }
  static FieldValue u16(std::uint16_t v) { return {'u', v}; }
  static FieldValue i32(std::int32_t v) { return {'I', v}; }
  static FieldValue u32(std::uint32_t v) { return {'i', v}; }
  static FieldValue i64(std::int64_t v) { return {'l', v}; }
  static FieldValue timestamp(std::uint64_t v) { return {'T', v}; }
  static FieldValue f32(float v) { return {'f', v}; }
  static FieldValue f64(double v) { return {'d', v}; }
  static FieldValue decimal(Decimal v) { return {'D', v}; }
  static FieldValue string(std::string v) { return {'S', std::move(v)}; }
  static FieldValue bytes(std::string v) { return {'x', std::move(v)}; }
  static FieldValue array(FieldArray v) { return {'A', std::move(v)}; }
  static FieldValue table(FieldTable v) { return {'F', std::move(v)}; }
  static FieldValue none() { return {'V', std::monostate{}}; }

  // The value as a signed integer, for any integer letter; nullopt otherwise or on overflow.
  std::optional<std::int64_t> as_int() const;
  // The value of an S or x field.
  const std::string* as_string() const { return std::get_if<std::string>(&value); }

  bool operator==(const FieldValue&) const = default;
};

// Limits that keep a hostile table from costing unbounded time, stack or memory.
struct TableLimits {
  std::size_t max_depth = 32;        // nested tables and arrays
  std::size_t max_values = 100'000;  // values in one top-level table, all levels counted
};

enum class TableError { none, truncated, unknown_type, too_deep, too_many_values };
std::string_view to_string(TableError error);

// Decodes a table whose 32-bit length prefix is at the reader's position, replacing what `out`
// held.
TableError decode_table(ByteReader& in, FieldTable& out, const TableLimits& limits = {});
TableError decode_array(ByteReader& in, FieldArray& out, const TableLimits& limits = {});
// Encodes with the length prefix. Fails (returns false) on a name over 255 bytes or an
// unknown type letter.
[[nodiscard]] bool encode_table(ByteWriter& out, const FieldTable& table);

}  // namespace nackguard::amqp
