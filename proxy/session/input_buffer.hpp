#pragma once
// The bytes read from one side and not handled yet: a partial frame carried over to the next
// read, which is read in place right after it. Not a vector: growing one would zero the space
// before every read. Sans-io: the relay reads into space(), the session handles pending().

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "proxy/amqp/bytes.hpp"

namespace nackguard::session {

class InputBuffer {
 public:
  // Where to read next: straight after the kept bytes, moved to the front of a buffer of at
  // least `buffer_bytes`. The buffer grows to hold a whole frame whose header is in, when that
  // frame is within `frame_max` (a larger one is refused by the decoder: no room is made).
  // Valid until the next call.
  std::span<std::uint8_t> space(std::size_t buffer_bytes, std::uint32_t frame_max);
  // `n` bytes were read into space().
  void commit(std::size_t n) { end_ += n; }
  // The bytes kept and read, not handled yet.
  amqp::ByteView pending() const { return {data_.get() + begin_, end_ - begin_}; }
  // The first `n` bytes of pending() were handled.
  void consume(std::size_t n) { begin_ += n; }
  bool empty() const { return begin_ == end_; }
  void clear() { begin_ = end_ = 0; }
  // Whether `bytes` lie in this buffer (a frame the session may forward as it was read).
  bool holds(amqp::ByteView bytes) const;

 private:
  std::unique_ptr<std::uint8_t[]> data_;
  std::size_t capacity_ = 0;
  std::size_t begin_ = 0;
  std::size_t end_ = 0;
};

}  // namespace nackguard::session
