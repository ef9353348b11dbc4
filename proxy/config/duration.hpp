#pragma once

#include <chrono>
#include <string>
#include <string_view>

namespace nackguard::config {

// Parses a duration written as a whole number followed by a unit: "500ms", "10s", "5m", "24h".
// A unit is required: a bare "10" could mean seconds or milliseconds, and guessing wrong turns a
// 10 s timeout into 10 ms. Throws std::invalid_argument whose message quotes the text, says what
// is wrong and shows a valid example; callers prefix it with where the text came from.
std::chrono::milliseconds parse_duration(std::string_view text);

// The inverse of parse_duration, in the largest unit that represents the value exactly
// ("24h", "90s", "1500ms"), so that describe() prints what a person would have written.
std::string format_duration(std::chrono::milliseconds duration);

}  // namespace nackguard::config
