#pragma once
// Why nackguard gave a message back to the broker as the consumer asked, instead of the copy
// its decision wanted: one enum for the decision (outcome.hpp), the guard that carries it out,
// the proxy channel that reports a failed copy, the metric's cause label and the log line.

#include <cstdint>
#include <string_view>

namespace nackguard::retry {

enum class FallbackCause : std::uint8_t {
  none,
  body_not_retained,  // the body could not be kept within limits.retained_body_bytes
  // A first delivery kept no body by design (guard_delivery.cpp): the decision's forward is no
  // fallback, except for a copy the broker's limit wanted (reported as body_not_retained).
  body_skipped,
  no_channel,            // the broker's channel_max leaves no channel for the proxy
  malformed_properties,  // the message's properties could not be copied into a header frame
  // The broker refused or did not confirm a copy for the queue: this one, or one moments ago
  // (GuardContext::copies_failing).
  republish_failed,
  encode_failed,  // a frame of the copy could not be encoded: nothing of it was sent
};
// The name the log and the metric's cause label use (body_skipped: body_not_retained).
std::string_view to_string(FallbackCause cause);

// A fallback as it is reported.
struct Fallback {
  FallbackCause cause = FallbackCause::none;
  // The copy was to keep the message from the broker's own delivery limit, which the
  // consumer's requeue may now pass: reported as a cause of its own, at_broker_limit, with
  // `cause` in its detail.
  bool at_broker_limit = false;
};

}  // namespace nackguard::retry
