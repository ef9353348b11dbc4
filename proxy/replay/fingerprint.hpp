#pragma once
// A message's identity across its trips through the DLQ, for `nackguard replay`.

#include <cstdint>

#include "proxy/amqp/properties.hpp"

namespace nackguard::replay {

// 64-bit FNV-1a over message_id, correlation_id, timestamp, x-nackguard-replays and the body:
// what nackguard keeps when it dead-letters a message again, and what changes (the replay
// count) when this tool moves it. Identical messages with the same replay count collide, which
// is what the callers want: a copy that comes back is recognised, an untouched twin is not.
std::uint64_t fingerprint(const amqp::ContentHeader& header, amqp::ByteView body);

}  // namespace nackguard::replay
