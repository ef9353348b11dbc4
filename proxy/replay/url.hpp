#pragma once
// The broker address of `nackguard replay`: amqp[s]://USER:PASS@HOST:PORT/VHOST URLs, and where
// the credentials come from (--upstream or NACKGUARD_REPLAY_UPSTREAM).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace nackguard::replay {

inline constexpr std::string_view kUpstreamEnv = "NACKGUARD_REPLAY_UPSTREAM";
inline constexpr std::uint16_t kDefaultAmqpPort = 5672;
inline constexpr std::uint16_t kDefaultAmqpsPort = 5671;

struct Upstream {
  std::string host;
  std::uint16_t port = kDefaultAmqpPort;
  std::string user = "guest";
  std::string password = "guest";
  std::string vhost = "/";
  bool tls = false;       // amqps://
  bool external = false;  // ?auth_mechanism=external: SASL EXTERNAL, the client certificate

  // "host:port", with brackets around an IPv6 address; never the credentials.
  std::string endpoint() const;
  bool operator==(const Upstream&) const = default;
};

// TLS towards the broker (amqps:// URLs): as upstream.tls, from the command line.
struct TlsSettings {
  bool enabled = false;
  bool verify = true;     // the broker's chain, dates and name
  std::string ca_file;    // PEM; empty: the system's trust store
  std::string cert_file;  // with key_file: the certificate presented (SASL EXTERNAL)
  std::string key_file;
  std::string server_name;  // the name the certificate must carry; empty: the URL's host
};

// One parsed URL. `user` and `password` are set only when the URL has a user part.
struct ParsedUrl {
  std::string host;
  std::uint16_t port = kDefaultAmqpPort;
  std::optional<std::string> user;
  std::optional<std::string> password;
  std::string vhost = "/";
  bool tls = false;
  bool external = false;
};

// Parses amqp[s]://[USER[:PASS]@]HOST[:PORT][/VHOST][?auth_mechanism=external|plain]
// (amqps: TLS, port 5671 by default). Every part is percent-decoded; an empty or
// absent path is the vhost "/", so "/%2F" and "/" both name it. Throws Failure with a message
// that never repeats the URL (it may hold a password); `source` names where the URL came from.
ParsedUrl parse_amqp_url(std::string_view url, std::string_view source = "--upstream");

// Decodes %XX escapes; nullopt on a malformed escape.
std::optional<std::string> percent_decode(std::string_view text);

// Combines --upstream and NACKGUARD_REPLAY_UPSTREAM (either may be absent):
//   host, port and vhost: from --upstream, else from the variable when it holds a whole URL;
//   credentials: from --upstream when it has a user part, else from the variable (its user
//   part, or the whole value when it is USER:PASS), else guest:guest.
// Throws UsageError when neither names a broker, Failure when a value is malformed.
Upstream resolve_upstream(const std::optional<std::string>& cli,
                          const std::optional<std::string>& env);

}  // namespace nackguard::replay
