#pragma once

// listen.tls and upstream.tls: which certificate, key and CA files, each checked to exist and
// be readable when the config is loaded. Whether OpenSSL accepts them is checked by
// net::load_tls (proxy/net/tls.hpp), which names the same file:line:column.

#include "proxy/config/config.hpp"
#include "proxy/config/yaml_section.hpp"

namespace nackguard::config::detail {

// `config.file` must be set: relative paths are resolved against its directory.
void read_listen_tls(const Source& source, const Section& listen, Config& config);

// `config.upstream.host` and `config.upstream_addresses` must be read first: they decide the
// default server_name.
void read_upstream_tls(const Source& source, const Section& upstream, Config& config);

}  // namespace nackguard::config::detail
