#pragma once
// Bounds-checked big-endian reading and writing over byte spans.
// Every length is checked as `len <= remaining()`, never `pos + len <= size`, so a hostile
// 64-bit length cannot wrap around.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace nackguard::amqp {

using Bytes = std::vector<std::uint8_t>;
using ByteView = std::span<const std::uint8_t>;

inline std::string_view as_chars(ByteView bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}
inline ByteView as_bytes(std::string_view text) {
  return {reinterpret_cast<const std::uint8_t*>(text.data()), text.size()};
}

// Reads from a span; a read past the end sets the failed flag and yields zeros, so a decoder
// can read a whole method and check `ok()` once at the end.
class ByteReader {
 public:
  explicit ByteReader(ByteView data) : data_(data) {}

  bool ok() const { return !failed_; }
  void fail() { failed_ = true; }
  std::size_t position() const { return pos_; }
  std::size_t remaining() const { return failed_ ? 0 : data_.size() - pos_; }
  bool at_end() const { return remaining() == 0; }

  std::uint8_t u8() {
    if (!need(1)) return 0;
    return data_[pos_++];
  }
  std::uint16_t u16() {
    if (!need(2)) return 0;
    std::uint16_t v = static_cast<std::uint16_t>((data_[pos_] << 8) | data_[pos_ + 1]);
    pos_ += 2;
    return v;
  }
  std::uint32_t u32() {
    if (!need(4)) return 0;
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v = (v << 8) | data_[pos_ + i];
    pos_ += 4;
    return v;
  }
  std::uint64_t u64() {
    if (!need(8)) return 0;
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | data_[pos_ + i];
    pos_ += 8;
    return v;
  }
  ByteView bytes(std::size_t len) {
    if (!need(len)) return {};
    ByteView v = data_.subspan(pos_, len);
    pos_ += len;
    return v;
  }
  std::string shortstr() { return std::string(shortstr_view()); }
  std::string longstr() { return std::string(longstr_view()); }
  // The same, viewing the input: assigned to a string that has the room, no allocation.
  std::string_view shortstr_view() { return as_chars(bytes(u8())); }
  std::string_view longstr_view() { return as_chars(bytes(u32())); }
  // Skips without copying; used where only the position matters.
  void skip_shortstr() { bytes(u8()); }

 private:
  bool need(std::size_t len) {
    if (failed_ || len > data_.size() - pos_) {
      failed_ = true;
      return false;
    }
    return true;
  }

  ByteView data_;
  std::size_t pos_ = 0;
  bool failed_ = false;
};

// Appends big-endian values to a byte vector. Strings too long for their length prefix set the
// failed flag instead of being truncated silently.
class ByteWriter {
 public:
  explicit ByteWriter(Bytes& out) : out_(out) {}

  bool ok() const { return !failed_; }
  std::size_t size() const { return out_.size(); }

  void u8(std::uint8_t v) { out_.push_back(v); }
  void u16(std::uint16_t v) {
    out_.push_back(static_cast<std::uint8_t>(v >> 8));
    out_.push_back(static_cast<std::uint8_t>(v));
  }
  void u32(std::uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8)
      out_.push_back(static_cast<std::uint8_t>(v >> shift));
  }
  void u64(std::uint64_t v) {
    for (int shift = 56; shift >= 0; shift -= 8)
      out_.push_back(static_cast<std::uint8_t>(v >> shift));
  }
  void bytes(ByteView v) { out_.insert(out_.end(), v.begin(), v.end()); }
  void shortstr(std::string_view s) {
    if (s.size() > 255) {
      failed_ = true;
      return;
    }
    u8(static_cast<std::uint8_t>(s.size()));
    bytes(as_bytes(s));
  }
  void longstr(std::string_view s) {
    if (s.size() > 0xFFFFFFFFu) {
      failed_ = true;
      return;
    }
    u32(static_cast<std::uint32_t>(s.size()));
    bytes(as_bytes(s));
  }
  // Overwrites 4 bytes at `at`, for length prefixes known only after the content is written.
  void patch_u32(std::size_t at, std::uint32_t v) {
    for (int i = 0; i < 4; ++i) out_[at + i] = static_cast<std::uint8_t>(v >> (24 - 8 * i));
  }
  void fail() { failed_ = true; }

 private:
  Bytes& out_;
  bool failed_ = false;
};

}  // namespace nackguard::amqp
