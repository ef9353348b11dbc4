#pragma once
// The broker address of `nackguard replay`: amqp://USER:PASS@HOST:PORT/VHOST URLs, and where
// the credentials come from (--upstream or NACKGUARD_REPLAY_UPSTREAM).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace nackguard::replay {

inline constexpr std::string_view kUpstreamEnv = "NACKGUARD_REPLAY_UPSTREAM";
inline constexpr std::uint16_t kDefaultAmqpPort = 5672;

struct Upstream {
  std::string host;
  std::uint16_t port = kDefaultAmqpPort;
  std::string user = "guest";
  std::string password = "guest";
  std::string vhost = "/";

  // "host:port", with brackets around an IPv6 address; never the credentials.
  std::string endpoint() const;
  bool operator==(const Upstream&) const = default;
};

// One parsed URL. `user` and `password` are set only when the URL has a user part.
struct ParsedUrl {
  std::string host;
  std::uint16_t port = kDefaultAmqpPort;
  std::optional<std::string> user;
  std::optional<std::string> password;
  std::string vhost = "/";
};

// Parses amqp://[USER[:PASS]@]HOST[:PORT][/VHOST]. Every part is percent-decoded; an empty or
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
