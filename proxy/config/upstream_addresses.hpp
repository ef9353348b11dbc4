#pragma once

// upstream.addresses: the broker nodes nackguard may connect to, as "host:port" strings, the
// alternative to upstream.host and upstream.port for a cluster.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "proxy/config/config.hpp"
#include "proxy/config/yaml_section.hpp"

namespace nackguard::config::detail {

// The most addresses one list may hold: each is a metric label value.
inline constexpr std::size_t kMaxUpstreamAddresses = 64;

// "host:port", "[v6]:port" or "v4:port" as an Endpoint (brackets dropped); nullopt with `why`
// set when it is not one.
std::optional<Endpoint> parse_host_port(std::string_view text, std::string& why);

// Reads upstream.addresses into config.upstream_addresses (and config.upstream, which becomes
// the first address). Fails when upstream.host or upstream.port is set as well.
void read_upstream_addresses(const Source& source, const Section& upstream, Config& config);

}  // namespace nackguard::config::detail
