#pragma once
// The headers the guard writes on its copies and reads back, and the broker's counting headers
// it reads: `nackguard replay` reads and rewrites the same ones.

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

}  // namespace nackguard::guard
