#pragma once
// When the relay's reader may send what it forwards itself (Stream::try_send), instead of
// waking the side's writer coroutine. Pure: the relay gathers the inputs.

#include <chrono>
#include <cstddef>

namespace nackguard::net {

// Over TLS, a side that no write reached for this long gets the next forward at once: a lone
// message does not wait for the writer's turn. Under load writes follow each other closer than
// this, and the writer gathers several reads into one record and one send (sending every read
// at once cost a fifth of the 1 KiB consume rate, docs/performance.md, "TLS on both sides").
inline constexpr std::chrono::microseconds kQuietWrite{50};

struct DirectWrite {
  bool tls = false;
  bool closed = false;
  std::size_t writing = 0;     // bytes the writer has in flight
  std::size_t sent_ahead = 0;  // bytes of the output already sent directly
  // TLS: the reader of the other side still holds records of the same burst.
  bool source_holds_input = false;
  std::chrono::steady_clock::duration since_last_write{};  // TLS: since a write ended
};

inline bool may_send_directly(const DirectWrite& d) {
  if (d.closed || d.writing != 0 || d.sent_ahead != 0) return false;
  if (!d.tls) return true;
  return !d.source_holds_input && d.since_last_write >= kQuietWrite;
}

}  // namespace nackguard::net
