#pragma once
// What the guard's files share and no one else uses: the bits of Delivery::cookie, and small
// readers of a delivery's header.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "proxy/guard/raw_properties.hpp"
#include "proxy/guard/seam.hpp"
#include "proxy/retry/guard_context.hpp"

namespace nackguard::guard::guard_internal {

// Bits of Delivery::cookie.
inline constexpr std::uint64_t kCounted = 1;       // told to the listener (on_delivery) already
inline constexpr std::uint64_t kMaybeTracked = 2;  // redelivered or a copy: the tracker may know it
inline constexpr std::uint64_t kHealthCounted = 4;  // counted as a message in the queue's health
inline constexpr std::uint64_t kBodySkipped =
    8;  // a first delivery that kept no body (guard_delivery.cpp)

// The properties of a delivery. A headers table the codec refuses (nested 10,000 deep, say)
// does not hide the message: its other properties and top-level headers still identify it.
// Once per delivery and decision: what a takeover decoded goes with its Intent to build_copy.
inline bool decode_delivery_header(const Delivery& d, RawProperties& out) {
  return decode_properties(d.header_payload, out);
}

// The 64 bits of a message's tracker key that outage detection tells messages apart by.
inline std::uint64_t message_hash(const retry::TrackerKey& key) {
  return key.low;
}

// Tells the listener what a health event changed: an outage's start or end, and an outage
// that lasted rate.max_outage (its returns count again from now on). Inline: it runs at every
// delivery, and a call into another file showed in session_bench.
inline void report_health(retry::GuardListener& listener, std::string_view queue,
                          const retry::RateLimits& rate, const retry::HealthChange& change) {
  if (change.changed) listener.on_outage(queue, change.outage, change.ratio);
  if (change.became_overdue) {
    listener.on_notice(queue, "in outage for " + std::to_string(change.outage_ms / 1000) +
                                  " s, rate.max_outage (" +
                                  std::to_string(rate.max_outage.count() / 1000) +
                                  " s): its returns count towards dead-lettering again until "
                                  "the outage ends");
  }
}

}  // namespace nackguard::guard::guard_internal
