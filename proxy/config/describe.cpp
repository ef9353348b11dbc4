#include <algorithm>
#include <sstream>

#include "proxy/config/config.hpp"
#include "proxy/config/policy_loader.hpp"

namespace nackguard::config {
namespace {

// "<source>:" then the policy's `key: value` lines, indented under it.
void append_policy(std::string& out, const retry::Policy& policy) {
  out.append(policy.source).append(":\n");
  std::istringstream lines(retry::describe(policy));
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty()) out.append("  ").append(line).append("\n");
  }
}

}  // namespace

std::string describe(const Config& config) {
  std::ostringstream out;
  out << "file: " << config.file.string() << "\n"
      << "listen.address: " << config.listen.host << "\n"
      << "listen.port: " << config.listen.port << "\n"
      << "upstream.host: " << config.upstream.host << "\n"
      << "upstream.port: " << config.upstream.port << "\n"
      << "upstream.connect_timeout: " << format_duration(config.upstream_connect_timeout) << "\n"
      << "threads: " << config.threads << "\n"
      << "policies_dir: " << config.policies_dir.string() << "\n"
      << "metrics.address: " << config.metrics.host << "\n"
      << "metrics.port: " << config.metrics.port << "\n"
      << "metrics.max_queue_labels: " << config.metrics_max_queue_labels << "\n"
      << "log.level: " << config.log_level << "\n"
      << "log.format: " << config.log_format << "\n"
      << "limits.max_frame_bytes: " << config.max_frame_bytes << "\n"
      << "limits.buffer_bytes: " << config.buffer_bytes << "\n"
      << "limits.retained_body_bytes: " << config.retained_body_bytes << "\n"
      << "timeouts.handshake: " << format_duration(config.handshake_timeout) << "\n"
      << "shutdown.grace: " << format_duration(config.shutdown_grace) << "\n"
      << "tracker.max_entries: " << config.tracker_max_entries << "\n"
      << "tracker.idle_ttl: " << format_duration(config.tracker_idle_ttl) << "\n";
  return out.str();
}

std::string describe_policies(const retry::PolicySet& policies) {
  std::string out;
  for (const retry::Policy& policy : policies.policies()) append_policy(out, policy);
  const bool has_default =
      std::any_of(policies.policies().begin(), policies.policies().end(),
                  [](const retry::Policy& policy) { return policy.queue == "*"; });
  if (!has_default) append_policy(out, policies.fallback());
  return out;
}

}  // namespace nackguard::config
