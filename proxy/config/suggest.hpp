#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace nackguard::config {

// The candidate a person most likely meant when they typed `typed`, for "did you mean" hints
// on misspelt keys and enum values. Returns nothing when no candidate is close enough: a wild
// guess is worse than none. Case is ignored, a swap of two neighbouring letters counts as one
// edit, and a candidate that is a prefix of what was typed (or the reverse) also counts.
std::optional<std::string> closest_match(std::string_view typed,
                                         std::span<const std::string_view> candidates);

// "a, b, c": for listing the valid choices in a message.
std::string join(std::span<const std::string_view> items);

}  // namespace nackguard::config
