#pragma once
// A message's identity under a policy, and the return count it carries in its headers.

#include <optional>
#include <string>

#include "proxy/amqp/properties.hpp"
#include "proxy/guard/header_names.hpp"
#include "proxy/guard/seam.hpp"
#include "proxy/retry/decision.hpp"
#include "proxy/retry/policy.hpp"

namespace nackguard::guard {

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
