#pragma once
// Every method struct of methods.hpp in one list, for the typed round-trip tests, the corpus
// replay and the fuzz_methods target; a snapshot that compares two method structs field by
// field (the structs have no operator==); and a filler that gives every field a value.
// Both walk a struct through its own `fields(m, io)` list, as the codec does.

#include <cstddef>
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "proxy/amqp/methods.hpp"
#include "proxy/amqp/table.hpp"

namespace nackguard::amqp::test {

// method_list_test.cpp checks that this list names every struct with a kKey in methods.hpp.
template <template <typename...> class List>
using AllMethods =
    List<ConnectionStart, ConnectionStartOk, ConnectionTune, ConnectionTuneOk, ConnectionOpen,
         ConnectionOpenOk, ConnectionClose, ConnectionCloseOk, ConnectionBlocked,
         ConnectionUnblocked, ChannelOpen, ChannelOpenOk, ChannelFlow, ChannelFlowOk, ChannelClose,
         ChannelCloseOk, QueueDeclare, QueueDeclareOk, BasicQos, BasicQosOk, BasicConsume,
         BasicConsumeOk, BasicCancel, BasicCancelOk, BasicPublish, BasicReturn, BasicDeliver,
         BasicGet, BasicGetOk, BasicGetEmpty, BasicAck, BasicNack, BasicReject, BasicRecover,
         BasicRecoverAsync, BasicRecoverOk, ConfirmSelect, ConfirmSelectOk>;

template <typename... Ms>
struct TypeList {
  static constexpr std::size_t size = sizeof...(Ms);
  // Calls f.template operator()<M>() for every M, in order.
  static void for_each(auto&& f) { (f.template operator()<Ms>(), ...); }
};

// A method's fields in wire order. Tables are kept as their encoding, so floats inside them
// compare bit for bit: a NaN equals itself, and 0.0 differs from -0.0.
class FieldSnapshot {
 public:
  using Field = std::variant<std::uint64_t, bool, std::string, Bytes>;

  template <typename M>
  static std::vector<Field> of(const M& method) {
    FieldSnapshot snapshot;
    M::fields(method, snapshot);
    return std::move(snapshot.fields_);
  }

  void u8(std::uint8_t v) { fields_.emplace_back(std::uint64_t{v}); }
  void u16(std::uint16_t v) { fields_.emplace_back(std::uint64_t{v}); }
  void u32(std::uint32_t v) { fields_.emplace_back(std::uint64_t{v}); }
  void u64(std::uint64_t v) { fields_.emplace_back(v); }
  void shortstr(const std::string& v) { fields_.emplace_back(v); }
  void longstr(const std::string& v) { fields_.emplace_back(v); }
  void table(const FieldTable& v) {
    Bytes encoded;
    ByteWriter writer(encoded);
    if (!encode_table(writer, v)) encoded = {'?'};  // 1 byte: never a valid table encoding
    fields_.emplace_back(std::move(encoded));
  }
  template <typename... B>
  void bits(const B&... flags) {
    (fields_.emplace_back(static_cast<bool>(flags)), ...);
  }

 private:
  std::vector<Field> fields_;
};

// A table holding every type letter, with a nested table and array; the typed round-trip
// tests put it wherever a method has a table.
inline FieldTable every_letter_table() {
  FieldTable nested;
  nested.set("deep", FieldValue::string("er"));
  FieldArray array;
  array.items = {FieldValue::i32(-1), FieldValue::string(""), FieldValue::table(nested)};
  FieldTable table;
  table.set("t", FieldValue::boolean(true));
  table.set("b", FieldValue::i8(-128));
  table.set("B", FieldValue::u8(255));
  table.set("s", FieldValue::i16(-2));
  table.set("u", FieldValue::u16(65535));
  table.set("I", FieldValue::i32(-2147483647 - 1));
  table.set("i", FieldValue::u32(4294967295u));
  table.set("l", FieldValue::i64(-5));
  table.set("f", FieldValue::f32(1.5f));
  table.set("d", FieldValue::f64(-0.25));
  table.set("D", FieldValue::decimal({2, 12345}));
  table.set("S", FieldValue::string("text"));
  table.set("A", FieldValue::array(array));
  table.set("T", FieldValue::timestamp(1700000000));
  table.set("F", FieldValue::table(nested));
  table.set("V", FieldValue::none());
  table.set("x", FieldValue::bytes(std::string("\0\xff", 2)));
  return table;
}

// Gives every field of a method a value chosen by `pattern`:
//   zeros: zero, empty and false everywhere;
//   ones:  the largest integers, 255-byte short strings, every bit set, every-letter tables;
//   mixed: distinct values per field and alternating bits, so swapped fields show up.
enum class FillPattern { zeros, ones, mixed };

class FieldFiller {
 public:
  explicit FieldFiller(FillPattern pattern) : pattern_(pattern) {}

  template <typename M>
  static M make(FillPattern pattern) {
    M method;
    FieldFiller filler(pattern);
    M::fields(method, filler);
    return method;
  }

  void u8(std::uint8_t& v) { v = static_cast<std::uint8_t>(number(0xFF)); }
  void u16(std::uint16_t& v) { v = static_cast<std::uint16_t>(number(0xFFFF)); }
  void u32(std::uint32_t& v) { v = static_cast<std::uint32_t>(number(0xFFFFFFFFu)); }
  void u64(std::uint64_t& v) { v = number(~std::uint64_t{0}); }
  void shortstr(std::string& v) { v = text(255); }
  void longstr(std::string& v) {
    v = text(1000);
    if (pattern_ == FillPattern::mixed) v += std::string("\0\x01\xfe", 3);  // binary-safe
  }
  void table(FieldTable& v) {
    v = pattern_ == FillPattern::zeros ? FieldTable{} : every_letter_table();
    if (pattern_ == FillPattern::mixed) v.set("field", FieldValue::u32(counter_++));
  }
  template <typename... B>
  void bits(B&... flags) {
    ((flags = bit()), ...);
  }

 private:
  std::uint64_t number(std::uint64_t max) {
    switch (pattern_) {
      case FillPattern::zeros:
        return 0;
      case FillPattern::ones:
        return max;
      case FillPattern::mixed:
        break;
    }
    // 0x0102..: every byte differs, so a byte-order or width mistake changes the value.
    std::uint64_t v = 0x0102030405060708ull + 0x1111111111111111ull * counter_++;
    return v & max;
  }
  std::string text(std::size_t max) {
    switch (pattern_) {
      case FillPattern::zeros:
        return {};
      case FillPattern::ones:
        return std::string(max, 'z');
      case FillPattern::mixed:
        break;
    }
    return "field-" + std::to_string(counter_++);
  }
  bool bit() {
    switch (pattern_) {
      case FillPattern::zeros:
        return false;
      case FillPattern::ones:
        return true;
      case FillPattern::mixed:
        break;
    }
    return (counter_++ % 2) == 0;
  }

  FillPattern pattern_;
  std::uint32_t counter_ = 0;
};

}  // namespace nackguard::amqp::test
