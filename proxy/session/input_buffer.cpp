#include "proxy/session/input_buffer.hpp"

#include <algorithm>
#include <cstring>

#include "proxy/amqp/frame.hpp"

namespace nackguard::session {

std::span<std::uint8_t> InputBuffer::space(std::size_t buffer_bytes, std::uint32_t frame_max) {
  std::size_t kept = end_ - begin_;
  std::size_t needed = std::max(buffer_bytes, kept + 1);
  if (kept >= amqp::kFrameHeaderSize) {
    const std::uint8_t* header = data_.get() + begin_;
    std::uint64_t frame_size =
        amqp::kFrameOverhead + (std::uint64_t{header[3]} << 24 | std::uint64_t{header[4]} << 16 |
                                std::uint64_t{header[5]} << 8 | header[6]);
    if (frame_size <= frame_max) needed = std::max<std::size_t>(needed, frame_size);
  }
  if (capacity_ < needed) {
    auto bigger = std::make_unique_for_overwrite<std::uint8_t[]>(needed);
    if (kept > 0) std::memcpy(bigger.get(), data_.get() + begin_, kept);
    data_ = std::move(bigger);
    capacity_ = needed;
  } else if (begin_ > 0) {
    // Reads always start near the front: with small frames only the first pages are touched.
    std::memmove(data_.get(), data_.get() + begin_, kept);
  }
  begin_ = 0;
  end_ = kept;
  return {data_.get() + end_, capacity_ - end_};
}

bool InputBuffer::holds(amqp::ByteView bytes) const {
  auto at = reinterpret_cast<std::uintptr_t>(bytes.data());
  auto first = reinterpret_cast<std::uintptr_t>(data_.get());
  return !bytes.empty() && at >= first && at + bytes.size() <= first + capacity_;
}

}  // namespace nackguard::session
