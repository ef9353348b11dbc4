#pragma once

// listen.tls and upstream.tls: which certificate, key and CA files, each checked to exist and
// be readable when the config is loaded (read_config_file, which upstream.management uses
// too). Whether OpenSSL accepts them is checked by net::load_tls (proxy/net/tls.hpp), which
// names the same file:line:column.

#include "proxy/config/config.hpp"
#include "proxy/config/yaml_section.hpp"

namespace nackguard::config::detail {

// A file named under `key` of `section` (empty when the key is absent): resolved against the
// config file's directory, and checked to be readable now, so that a wrong path is reported at
// its line rather than when it is used. `what` names it in the message ("the CA file").
ConfigFile read_config_file(const Source& source, const Section& section, std::string_view key,
                            const std::filesystem::path& config_file, std::string_view what);

// `config.file` must be set: relative paths are resolved against its directory.
void read_listen_tls(const Source& source, const Section& listen, Config& config);

// `config.upstream.host` and `config.upstream_addresses` must be read first: they decide the
// default server_name.
void read_upstream_tls(const Source& source, const Section& upstream, Config& config);

}  // namespace nackguard::config::detail
