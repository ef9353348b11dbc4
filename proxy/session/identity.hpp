#pragma once
// A message's identity under a policy, and the return count it carries in its headers.

#include <optional>
#include <string>

#include "proxy/amqp/properties.hpp"
#include "proxy/retry/decision.hpp"
#include "proxy/retry/policy.hpp"
#include "proxy/session/delivery.hpp"

namespace nackguard::session {

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
inline constexpr const char* kDeliveryCountHeader = "x-delivery-count";  // quorum queues

// The first identity source of the policy that the message has. `body` hashes the exchange,
// the routing key (the original ones, for a copy nackguard republished) and the body, so it
// needs the body: nullopt when no source is present or the body is not complete yet.
std::optional<std::string> message_identity(const std::vector<retry::IdentitySource>& sources,
                                            const amqp::BasicProperties& properties,
                                            const Delivery& delivery);

// Whether the identity may need the body (the policy lists body and no earlier source is present).
bool identity_needs_body(const std::vector<retry::IdentitySource>& sources,
                         const amqp::BasicProperties& properties);

// x-nackguard-returns, x-delivery-count and x-nackguard-deliveries, each 0 when absent (or not
// an integer), and whether x-delivery-count is there at all.
retry::CarriedCount carried_count(const amqp::BasicProperties& properties);

}  // namespace nackguard::session
