#pragma once

// nackguard's own settings (conf/nackguard.yaml): where to listen, which broker to front, and
// the limits that protect the proxy. Loading validates everything up front, so that a typo
// stops the start with a message naming file:line:column and key, instead of the proxy
// running on a silent default.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "proxy/config/duration.hpp"

namespace nackguard::config {

struct Endpoint {
  std::string host;  // a host name or an IP address; for listen and metrics, the bind address
  std::uint16_t port;
};

// A file named in the config (a certificate, a key), kept with where it was named, so that a
// problem found when OpenSSL loads it can still point at the line.
struct ConfigFile {
  // Absolute: a relative value is taken relative to the config file's directory.
  std::filesystem::path path;
  std::string key_location;  // "FILE:LINE:COLUMN: listen.tls.cert_file"
  bool empty() const { return path.empty(); }
};

// listen.tls: clients connect with TLS. See docs/tls.md.
struct ListenTls {
  ConfigFile cert_file;  // PEM: the proxy's certificate, then any intermediates
  ConfigFile key_file;   // PEM, unencrypted
  // PEM: the CAs whose client certificates are accepted. Empty: none is asked for; set: one is
  // asked for and, when presented, verified.
  ConfigFile ca_file;
  bool require_client_cert = false;  // needs ca_file
};

// upstream.tls: the proxy connects to the broker with TLS. See docs/tls.md.
struct UpstreamTls {
  bool verify = true;  // the broker's certificate chain, dates and name
  ConfigFile ca_file;  // PEM; empty: the system's trust store
  // Sent as SNI and matched against the broker's certificate. When not set: upstream.host, or
  // with upstream.addresses empty, meaning each address's own host name.
  std::string server_name;
  // Both or neither: the client certificate the proxy presents (for SASL EXTERNAL).
  ConfigFile cert_file;
  ConfigFile key_file;
};

// upstream.management: RabbitMQ's management API, read for each queue's delivery limit in
// force (docs/operations.md, "Delivery limits from the management API").
struct UpstreamManagement {
  std::string url;  // as written, for messages
  bool https = false;
  Endpoint endpoint{"127.0.0.1", 15672};
  std::string path_prefix;  // "" or e.g. "/rabbitmq": the API answers at PREFIX/api/...
  std::string username;
  // From `password`, or read from `password_file` when the config is loaded. Never shown.
  std::string password;
  ConfigFile password_file;  // empty when `password` is given
  std::chrono::milliseconds refresh{60000};
  std::chrono::milliseconds timeout{5000};
  bool verify = true;    // https: the API's certificate chain, dates and name
  ConfigFile ca_file;    // https; empty: the system's trust store
  std::string location;  // "FILE:LINE:COLUMN" of the management key, for messages
};

struct Config;
// The broker addresses to connect to: upstream.addresses, or the one of upstream.host/port.
std::vector<Endpoint> upstream_targets(const Config& config);
// "host:port", with an IPv6 address in brackets: as in upstream.addresses and in messages.
std::string to_string(const Endpoint& endpoint);

struct Config {
  std::filesystem::path file;  // the file it was loaded from, absolute
  Endpoint listen{"127.0.0.1", 5673};
  // upstream.host and upstream.port; with upstream.addresses, the first address.
  Endpoint upstream{"127.0.0.1", 5672};
  // upstream.addresses, in the order written; empty when upstream.host/port are used.
  std::vector<Endpoint> upstream_addresses;
  std::optional<ListenTls> listen_tls;      // absent: clients connect in plain TCP
  std::optional<UpstreamTls> upstream_tls;  // absent: plain TCP to the broker
  // Absent: no lookups; delivery limits come from declares and policies only.
  std::optional<UpstreamManagement> upstream_management;
  std::chrono::milliseconds upstream_connect_timeout{5000};
  // 1..256. One by default: a second thread cost a third more CPU per message, for no
  // throughput, at 1 and at 100 connections (docs/performance.md, "Threads").
  unsigned threads = 1;
  // Absolute after loading: a relative value is taken relative to the config file's directory,
  // so the proxy finds its policies whatever directory it is started from.
  std::filesystem::path policies_dir = "../policies";
  Endpoint metrics{"127.0.0.1", 9464};
  std::string log_level = "info";   // trace|debug|info|warn|error|critical|off
  std::string log_format = "text";  // text|json
  // 4096..16777216. The broker's frame_max offer is lowered to it, so that neither side can
  // send a frame larger than the proxy is willing to hold.
  std::uint32_t max_frame_bytes = 1048576;
  // 65536..268435456, per connection and direction: output buffered beyond it stops reading
  // from the other side (back-pressure).
  std::size_t buffer_bytes = 1048576;
  std::chrono::milliseconds handshake_timeout{10000};
  // On SIGTERM or SIGINT, how long clients may take to disconnect by themselves before
  // nackguard closes them with connection.close 320.
  std::chrono::milliseconds shutdown_grace{30000};
  // reload.watch: reload when the config file or a policy file changes (inotify), as on SIGHUP.
  // Read at start only.
  bool reload_watch = true;
  // Distinct queue label values in metrics; further queues are counted under "_other".
  std::size_t metrics_max_queue_labels = 100;
  // Whether /status shows the messages' identities (message_id, a header's value); when false,
  // each shows as the short id the log lines carry. Applied by a reload.
  bool metrics_show_identities = false;
  // The redelivery tracker: how many messages' return counts it remembers (1..100000000), and
  // how long it keeps one that is not returned again (1s..8760h). Past max_entries the least
  // recently returned message is forgotten first.
  std::size_t tracker_max_entries = 100000;
  std::chrono::milliseconds tracker_idle_ttl{std::chrono::hours(24)};
  // 0..68719476736, across all connections: bodies of unacked deliveries kept so that the
  // proxy can republish them (delay, dead_letter via publish). 0 never keeps one, so every
  // republish falls back.
  std::uint64_t retained_body_bytes = 268435456;
};

// What is wrong, where (file:line:column, key) and what to do, ready to show to a person.
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Reads and validates the file; an empty file means all defaults. Throws ConfigError.
Config load_config(const std::filesystem::path& file);

// As load_config, for text already in memory. `file_for_messages` names the file in messages
// and is where a relative policies_dir is resolved from; the policies directory must exist.
// Throws ConfigError.
Config parse_config(std::string_view yaml_text, const std::filesystem::path& file_for_messages);

// The effective configuration, one "key: value" line per setting with dotted keys as in the
// file, for --check-config.
std::string describe(const Config& config);

namespace detail {

// The whole of `file`, for the config and policy loaders; `what` names it in messages ("config
// file", "policy file"). Throws ConfigError saying why it cannot be read.
std::string read_text_file(const std::filesystem::path& file, std::string_view what);

}  // namespace detail

}  // namespace nackguard::config
