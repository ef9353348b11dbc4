#pragma once
// One read from the broker as net::Relay does it: the bytes land in the session's input
// space, then either
//   - relay_read(): as over plain TCP when the relay may write ahead (Relay::may_send_ahead):
//     what receive_input() offers is written (as many of its bytes as `write` says went), then
//     the read is handled;
//   - relay_read_in_turn(): as while the relay writes, or over TLS: commit_input().
// Shared by the unit tests (send_ahead_test.cpp) and tests/bench/session_bench.cpp.

#include <cstdlib>
#include <cstring>
#include <span>

#include "proxy/session/session.hpp"

namespace nackguard::session {

inline constexpr std::size_t kRelayReadChunk = 256 * 1024;  // net::Relay::kReadChunk

inline void read_into_input(Session& session, amqp::ByteView bytes) {
  std::span<std::uint8_t> space = session.input_space(Side::broker, kRelayReadChunk);
  if (space.size() < bytes.size()) std::abort();  // more than the relay reads at once
  std::memcpy(space.data(), bytes.data(), bytes.size());
}

// `write(offered)` returns how many of the offered bytes were written. Returns what was
// offered: it lies in the input buffer, valid until the next read.
template <typename Write>
amqp::ByteView relay_read(Session& session, amqp::ByteView bytes, Write write) {
  read_into_input(session, bytes);
  const amqp::ByteView ahead = session.receive_input(Side::broker, bytes.size());
  session.written_ahead(Side::client, write(ahead));
  session.handle_input(Side::broker);
  return ahead;
}

inline void relay_read_in_turn(Session& session, amqp::ByteView bytes) {
  read_into_input(session, bytes);
  session.commit_input(Side::broker, bytes.size());
}

}  // namespace nackguard::session
