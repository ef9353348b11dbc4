#pragma once

// Typed reads of one field, each failing with "expected <what>, got <what was there>" at the
// value's position, so that the message itself says what to write instead.

#include <chrono>
#include <cstdint>
#include <optional>
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
// `true` or `false`.
bool read_bool(const Field& field);

// Non-empty text without spaces: a host name, an address, a path.
std::string read_word(const Field& field, std::string_view what);

// A plain decimal such as 2, 1.5 or 0.2: no exponent, no inf or nan.
std::optional<double> parse_fixed_decimal(std::string_view text);

// A fraction in (0, 1]; `example` ends the message, e.g. "such as 0.5".
double read_fraction(const Field& field, std::string_view example);

// Queue, exchange, routing key and header names are AMQP short strings: at most 255 bytes.
// `what` names them in the message, e.g. "queue names".
void check_name_length(const Field& field, std::string_view name, std::string_view what);

}  // namespace nackguard::config::detail
