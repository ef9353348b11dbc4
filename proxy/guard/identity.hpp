#pragma once
// A message's identity under a policy, and the return count it carries in its headers.

#include <optional>
#include <string>

#include "proxy/amqp/properties.hpp"
#include "proxy/guard/seam.hpp"
#include "proxy/retry/decision.hpp"
#include "proxy/retry/policy.hpp"

namespace nackguard::guard {

// Header names nackguard writes on the copies it publishes.
inline constexpr const char* kReturnsHeader = "x-nackguard-returns";
inline constexpr const char* kFirstReturnHeader = "x-nackguard-first-return";
inline constexpr const char* kLastReturnHeader = "x-nackguard-last-return";
inline constexpr const char* kReasonHeader = "x-nackguard-reason";
inline constexpr const char* kQueueHeader = "x-nackguard-queue";
inline constexpr const char* kConsumerHeader = "x-nackguard-consumer";
inline constexpr const char* kDeliveriesHeader = "x-nackguard-deliveries";
inline constexpr const char* kOriginalExchangeHeader = "x-original-exchange";
inline constexpr const char* kOriginalRoutingKeyHeader = "x-original-routingKey";
// The queue x-nackguard-returns counts in, on every copy: read from another queue (a DLQ, a
// shovel's destination), the count is history and the message starts a count of its own.
inline constexpr const char* kReturnsQueueHeader = "x-nackguard-returns-queue";
// Which copy this is: a random number per copy, so that a tracker entry made for one copy is
// known to be stale for another (retry::entry_matches).
inline constexpr const char* kCopyIdHeader = "x-nackguard-copy-id";
// The copy was made at a crash: whichever sidecar delivers it hands it out alone.
inline constexpr const char* kSuspectHeader = "x-nackguard-suspect";
// On a copy of a quorum queue's message: x-nackguard-returns is the whole count, the broker's
// redelivered flag adds nothing (retry::CarriedCount::flag_counts).
inline constexpr const char* kExactHeader = "x-nackguard-exact";
inline constexpr const char* kDeliveryCountHeader = "x-delivery-count";  // quorum queues
inline constexpr const char* kAcquiredCountHeader = "x-acquired-count";  // quorum, 4.3 on

// The first identity source of the policy that the message has. `body` hashes the exchange,
// the routing key (the original ones, for a copy nackguard republished) and the body, so it
// needs the body: nullopt when no source is present or the body is not complete yet.
std::optional<std::string> message_identity(const std::vector<retry::IdentitySource>& sources,
                                            const amqp::BasicProperties& properties,
                                            const Delivery& delivery);

// Whether the identity may need the body (the policy lists body and no earlier source is present).
bool identity_needs_body(const std::vector<retry::IdentitySource>& sources,
                         const amqp::BasicProperties& properties);

// What a delivery of a message carries of its count (retry::CarriedCount): x-nackguard-returns,
// x-nackguard-deliveries and x-nackguard-suspect when x-nackguard-returns-queue names the
// delivery's queue (or, on a copy from before that header, when it is no dead letter), each 0
// or false otherwise; x-nackguard-copy-id, x-delivery-count and whether it is there at all;
// and the delivery's redelivered flag.
retry::CarriedCount carried_count(const amqp::BasicProperties& properties,
                                  const Delivery& delivery);

}  // namespace nackguard::guard
