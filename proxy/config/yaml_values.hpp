#pragma once

// Typed reads of one field, each failing with "expected <what>, got <what was there>" at the
// value's position, so that the message itself says what to write instead.

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "proxy/config/yaml_section.hpp"

namespace nackguard::config::detail {

// A whole decimal number in [min, max]. `what` names it in the message, e.g. "an integer" or
// "a number of bytes".
std::uint64_t read_integer(const Field& field, std::uint64_t min, std::uint64_t max,
                           std::string_view what = "an integer");

std::uint16_t read_port(const Field& field);

// A duration such as "10s" (see parse_duration) in [min, max].
std::chrono::milliseconds read_duration(const Field& field, std::chrono::milliseconds min,
                                        std::chrono::milliseconds max);

// One of `choices`, exactly; a near miss gets a "did you mean".
std::string read_choice(const Field& field, std::span<const std::string_view> choices);

// Non-empty text without spaces: a host name, an address, a path.
std::string read_word(const Field& field, std::string_view what);

}  // namespace nackguard::config::detail
