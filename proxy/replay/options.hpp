#pragma once
// The command line of `nackguard replay`, parsed and validated without touching the network.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "proxy/replay/triage.hpp"
#include "proxy/replay/url.hpp"

namespace nackguard::replay {

inline constexpr std::int64_t kDefaultMaxReplays = 3;

struct Options {
  Upstream upstream;
  TlsSettings tls;   // enabled with an amqps:// URL
  std::string from;  // the dead-letter queue
  std::string to;    // where copies go, through the default exchange
  std::optional<std::uint64_t> limit;
  std::optional<double> rate;  // messages per second
  std::int64_t max_replays = kDefaultMaxReplays;
  bool dry_run = false;
  std::vector<TriageKey> group_by{TriageKey{TriageKey::Kind::reason, {}}};  // --group-by
  std::vector<Condition> where;                                             // --where, all hold
  std::optional<std::chrono::seconds> since;  // last return at most this long ago
  std::optional<std::chrono::seconds> until;  // last return at least this long ago
  bool json = false;                          // --format json
};

struct ParsedArgs {
  bool help = false;  // --help: print `usage` and exit 0
  std::string usage;
  Options options;  // valid unless help
};

// argv[0] is the subcommand's name ("replay"). `env_upstream` is NACKGUARD_REPLAY_UPSTREAM.
// Throws UsageError for a wrong command line, Failure for a malformed URL.
ParsedArgs parse_args(int argc, const char* const* argv,
                      const std::optional<std::string>& env_upstream);

// Strict number parsing for option values: the whole text must be the number.
std::optional<std::uint64_t> parse_count(const std::string& text);
std::optional<double> parse_rate(const std::string& text);

}  // namespace nackguard::replay
