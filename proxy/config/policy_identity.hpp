#pragma once

// A policy's `identity`: the list of sources a message's identity is taken from, each checked
// and named in a message that says what to write instead.

#include <vector>

#include "proxy/config/yaml_section.hpp"
#include "proxy/retry/policy.hpp"

namespace nackguard::config::detail {

std::vector<retry::IdentitySource> read_identity(const Source& source, const Field& field);

}  // namespace nackguard::config::detail
