#pragma once
// Every queue name and routing key nackguard builds (a DLQ from the dead_letter.routing_key
// template, a delay queue, a routing key to a named exchange) is an AMQP short string: 255
// bytes at most. One rule shortens them all, so that the same name maps the same way in every
// proxy replica and distinct long names stay distinct:
//
//   a name over 255 bytes keeps its fixed ending (".dlq", ".<ttl>ms", the template's text
//   after its last {queue}); its beginning is cut, at a UTF-8 character boundary, to make room
//   for "~" and 16 hex digits of the XXH3-64 hash of the whole, uncut name, placed before that
//   ending.
//
// A name of 255 bytes or fewer is left as it is.

#include <cstddef>
#include <string>
#include <string_view>

#include "proxy/retry/policy.hpp"

namespace nackguard::retry {

inline constexpr std::size_t kMaxNameBytes = 255;
// "~" and 16 hex digits.
inline constexpr std::size_t kNameHashBytes = 17;

// `name` if it fits; otherwise shortened as above, keeping its last `kept_ending` bytes (an
// ending too long to leave room for a prefix is cut with the rest).
std::string fit_name(std::string_view name, std::size_t kept_ending = 0);

// The dead-letter routing key for `queue` (with the default exchange, the DLQ's name): the
// template expanded, then fitted, keeping the template's text after its last {queue}.
std::string dead_letter_routing_key(const DeadLetter& dead_letter, std::string_view queue);

}  // namespace nackguard::retry
