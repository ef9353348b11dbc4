#pragma once
// nackguard-bench's command line: the load to run, the target, and the processes to watch.

#include <sys/types.h>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace nackguard::bench {

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One relay (or the broker itself) that --targets names: connection i goes to target i mod n.
struct Target {
  std::string label;  // e.g. "direct" or "nackguard"; keys the report's latency_by_target
  std::uint16_t port = 0;
};

enum class Mode {
  sequential,  // publish every message, then consume them: one rate per direction
  concurrent,  // consumers run while publishers publish: latency without queueing
};

struct Options {
  std::string host = "127.0.0.1";
  std::uint16_t port = 5672;
  std::string user = "guest";
  std::string password = "guest";
  std::string vhost = "/";
  std::string label;  // names the run in the report, e.g. "direct" or "nackguard"
  // Not empty: TLS, verifying the peer's certificate chain against this CA file (PEM); the
  // peer's name is not checked (every target is 127.0.0.1).
  std::string tls_ca_file;
  // Not empty: a paired run. Publishing connection i and its consuming connection go to
  // targets[i % n], so every target sees the same machine state; `port` serves only the setup
  // connection (queue declare and delete).
  std::vector<Target> targets;

  Mode mode = Mode::sequential;
  std::uint64_t messages = 100000;
  std::size_t size = 1024;
  std::uint32_t connections = 1;  // publishing connections; as many consuming ones
  std::uint16_t prefetch = 100;
  std::uint32_t ack_every = 1;         // >1: one basic.ack(multiple=true) per this many
  std::uint32_t confirm_window = 512;  // unconfirmed publishes per connection
  double nack_fraction = 0;            // messages nacked with requeue=true, nack_times times
  std::uint32_t nack_times = 1;        // how often each of those is nacked before its ack
  bool quorum = false;                 // declare quorum queues (x-queue-type quorum, durable)
  double rate = 0;                     // total msg/s the publishers keep to; 0 = flat out
  bool persistent = false;             // delivery_mode 2 instead of 1
  bool message_id = true;              // set message_id (the proxy's first identity source)
  std::uint32_t frame_max = 131072;    // what the client asks for in tune-ok
  std::vector<pid_t> pids;             // processes whose CPU and RSS are measured
  double stall_timeout_s = 30;         // give up when nothing moves for this long
  double timeout_s = 900;              // give up after this long in all
  bool json_only = false;
};

// The port of connection `index`: its target's, or `port` without --targets.
inline std::uint16_t connection_port(const Options& options, std::uint32_t index) {
  if (options.targets.empty()) return options.port;
  return options.targets[index % options.targets.size()].port;
}

// Parses argv. Throws UsageError with a message for a person; returns nullopt after --help.
std::optional<Options> parse_options(int argc, char** argv);

}  // namespace nackguard::bench
