#pragma once
// What becomes of a message's return, and why a message is dead-lettered: the decision's
// (decision.hpp) and the tracker entry's (a crash's decision pending until the next delivery).

#include <cstdint>
#include <string_view>

namespace nackguard::retry {

// republish: a copy goes to the tail of the message's own queue at once and the original is
// acked, so the copy carries the count (x-nackguard-returns) and the broker's own counters
// start again.
enum class Action : std::uint8_t { forward = 0, delay = 1, dead_letter = 2, republish = 3 };
// broker_delivery_limit: the return that passed the policy's limit would also have passed the
// broker's own delivery limit.
enum class DeadLetterReason : std::uint8_t {
  none = 0,
  max_redeliveries = 1,
  crash_loop = 2,
  broker_delivery_limit = 3,
  // The return past the limit was the consumer holding it unacked until RabbitMQ's
  // consumer_timeout (or the policy's ack_timeout) closed its channel.
  consumer_timeout = 4,
};
std::string_view to_string(Action action);
std::string_view to_string(DeadLetterReason reason);

}  // namespace nackguard::retry
