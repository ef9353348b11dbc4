#pragma once

// upstream.management: the URL of RabbitMQ's management API, the user and password nackguard
// reads it with, how often and how patiently. Files (password_file, ca_file) are checked to be
// readable when the config is loaded; the password file is read then.

#include <optional>
#include <string>
#include <string_view>

#include "proxy/config/config.hpp"
#include "proxy/config/yaml_section.hpp"

namespace nackguard::config::detail {

struct ManagementUrl {
  bool https = false;
  Endpoint endpoint;
  std::string path_prefix;  // "" or "/rabbitmq", without a trailing slash
};

// "http://HOST[:PORT][/PREFIX]" or "https://..." (ports 80 and 443 by default); nullopt with
// `why` set when it is not one.
std::optional<ManagementUrl> parse_management_url(std::string_view text, std::string& why);

// `config.file` must be set: relative paths are resolved against its directory.
void read_upstream_management(const Source& source, const Section& upstream, Config& config);

}  // namespace nackguard::config::detail
