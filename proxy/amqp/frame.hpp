#pragma once
// The protocol header and an incremental frame decoder. Bytes in; out comes one complete
// frame, "need more", or an error. Nothing is copied: a frame's views point into the input.

#include <cstdint>

#include "proxy/amqp/bytes.hpp"
#include "proxy/amqp/constants.hpp"

namespace nackguard::amqp {

enum class HeaderCheck { need_more, ok, bad };

// Checks the 8-byte protocol header a client sends first. Answers `bad` as soon as a byte
// differs, so an HTTP request or a 0-8 client is refused without waiting for 8 bytes.
HeaderCheck check_protocol_header(ByteView in);

struct Frame {
  std::uint8_t type = 0;
  std::uint16_t channel = 0;
  ByteView payload;  // between the 7-byte header and the end octet
  ByteView raw;      // the whole frame, header and end octet included

  FrameType frame_type() const { return static_cast<FrameType>(type); }
};

enum class FrameError { none, too_large, bad_end_octet, unknown_type, bad_heartbeat };
std::string_view to_string(FrameError error);

struct FrameResult {
  enum class Status { frame, need_more, error };
  Status status = Status::need_more;
  Frame frame;                          // valid when status == frame
  FrameError error = FrameError::none;  // valid when status == error
};

class FrameDecoder {
 public:
  // `frame_max` counts the whole frame (header, payload and end octet), as the spec does.
  explicit FrameDecoder(std::uint32_t frame_max = kFrameMinSize) : frame_max_(frame_max) {}

  void set_frame_max(std::uint32_t frame_max) { frame_max_ = frame_max; }
  std::uint32_t frame_max() const { return frame_max_; }

  // Decodes the first frame of `in`. The caller drops `frame.raw.size()` bytes afterwards.
  FrameResult decode(ByteView in) const;

 private:
  std::uint32_t frame_max_;
};

// Appends a complete frame.
void append_frame(Bytes& out, FrameType type, std::uint16_t channel, ByteView payload);
void append_heartbeat(Bytes& out);

}  // namespace nackguard::amqp
