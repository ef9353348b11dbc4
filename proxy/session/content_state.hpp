#pragma once
// Where a channel is in a content sequence (method, header, body frames) in one direction.

#include <cstdint>
#include <optional>

#include "proxy/amqp/frame.hpp"
#include "proxy/amqp/properties.hpp"

namespace nackguard::session {

struct ContentState {
  enum class Phase { idle, awaiting_header, awaiting_body };
  Phase phase = Phase::idle;
  std::uint64_t remaining = 0;

  bool in_progress() const { return phase != Phase::idle; }

  // A content frame (header or body) in the sequence: the header after its method, with a
  // body size; a body within the size the header announced. False, and nothing changes, for
  // one out of sequence.
  bool take(const amqp::Frame& frame) {
    if (frame.frame_type() == amqp::FrameType::header) {
      std::optional<std::uint64_t> size = amqp::peek_body_size(frame.payload);
      if (phase != Phase::awaiting_header || !size) return false;
      remaining = *size;
      phase = *size == 0 ? Phase::idle : Phase::awaiting_body;
      return true;
    }
    if (phase != Phase::awaiting_body || frame.payload.size() > remaining) return false;
    remaining -= frame.payload.size();
    if (remaining == 0) phase = Phase::idle;
    return true;
  }
};

}  // namespace nackguard::session
