#include <algorithm>
#include <sstream>

#include "proxy/config/config.hpp"
#include "proxy/config/policy_loader.hpp"
#include "proxy/retry/decision.hpp"

namespace nackguard::config {
namespace {

// "<source>:" then the policy's `key: value` lines, indented under it (without its own
// "source:" line, which would repeat the heading).
void append_policy(std::string& out, const retry::Policy& policy) {
  out.append(policy.source).append(":\n");
  std::istringstream lines(retry::describe(policy));
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && !line.starts_with("source: ")) out.append("  ").append(line).append("\n");
  }
}

std::string file_or(const ConfigFile& file, const char* absent) {
  return file.empty() ? absent : file.path.string();
}

// Only when set, so that a config without TLS describes as before.
void append_tls(std::ostream& out, const Config& config) {
  if (const auto& tls = config.listen_tls) {
    out << "listen.tls.cert_file: " << tls->cert_file.path.string() << "\n"
        << "listen.tls.key_file: " << tls->key_file.path.string() << "\n"
        << "listen.tls.ca_file: "
        << file_or(tls->ca_file, "(none: no client certificate asked for)") << "\n"
        << "listen.tls.require_client_cert: " << (tls->require_client_cert ? "true" : "false")
        << "\n";
  }
  if (const auto& tls = config.upstream_tls) {
    out << "upstream.tls.verify: " << (tls->verify ? "true" : "false") << "\n"
        << "upstream.tls.ca_file: "
        << file_or(tls->ca_file, tls->verify ? "(none: the system trust store)" : "(none)") << "\n"
        << "upstream.tls.server_name: "
        << (tls->server_name.empty() ? "(each address's host name)" : tls->server_name) << "\n"
        << "upstream.tls.cert_file: " << file_or(tls->cert_file, "(none)") << "\n"
        << "upstream.tls.key_file: " << file_or(tls->key_file, "(none)") << "\n";
  }
}

// Only when set, and never the password itself.
void append_management(std::ostream& out, const Config& config) {
  const auto& api = config.upstream_management;
  if (!api) return;
  out << "upstream.management.url: " << api->url << "\n"
      << "upstream.management.username: " << api->username << "\n"
      << "upstream.management.password: "
      << (api->password_file.empty() ? "(set in the config file)"
                                     : "(read from " + api->password_file.path.string() + ")")
      << "\n"
      << "upstream.management.refresh: " << format_duration(api->refresh) << "\n"
      << "upstream.management.timeout: " << format_duration(api->timeout) << "\n";
  if (api->https) {
    out << "upstream.management.verify: " << (api->verify ? "true" : "false") << "\n"
        << "upstream.management.ca_file: "
        << file_or(api->ca_file, api->verify ? "(none: the system trust store)" : "(none)") << "\n";
  }
}

// upstream.host and upstream.port, or upstream.addresses when those are set.
std::string upstream_lines(const Config& config) {
  if (config.upstream_addresses.empty()) {
    return "upstream.host: " + config.upstream.host +
           "\nupstream.port: " + std::to_string(config.upstream.port) + "\n";
  }
  std::string out = "upstream.addresses: [";
  for (const Endpoint& address : config.upstream_addresses) {
    if (&address != &config.upstream_addresses.front()) out += ", ";
    out += to_string(address);
  }
  return out + "]\n";
}

}  // namespace

std::string describe(const Config& config) {
  std::ostringstream out;
  out << "file: " << config.file.string() << "\n"
      << "listen.address: " << config.listen.host << "\n"
      << "listen.port: " << config.listen.port << "\n"
      << upstream_lines(config)
      << "upstream.connect_timeout: " << format_duration(config.upstream_connect_timeout) << "\n"
      << "threads: " << config.threads << "\n"
      << "policies_dir: " << config.policies_dir.string() << "\n"
      << "metrics.address: " << config.metrics.host << "\n"
      << "metrics.port: " << config.metrics.port << "\n"
      << "metrics.max_queue_labels: " << config.metrics_max_queue_labels << "\n"
      << "metrics.show_identities: " << (config.metrics_show_identities ? "true" : "false") << "\n"
      << "log.level: " << config.log_level << "\n"
      << "log.format: " << config.log_format << "\n"
      << "limits.max_frame_bytes: " << config.max_frame_bytes << "\n"
      << "limits.buffer_bytes: " << config.buffer_bytes << "\n"
      << "limits.retained_body_bytes: " << config.retained_body_bytes << "\n"
      << "timeouts.handshake: " << format_duration(config.handshake_timeout) << "\n"
      << "shutdown.grace: " << format_duration(config.shutdown_grace) << "\n"
      << "reload.watch: " << (config.reload_watch ? "true" : "false") << "\n"
      << "tracker.max_entries: " << config.tracker_max_entries << "\n"
      << "tracker.idle_ttl: " << format_duration(config.tracker_idle_ttl) << "\n";
  append_tls(out, config);
  append_management(out, config);
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

namespace {
// Each policy of `policies` once: the fallback too when no policy is for every queue ("*").
template <typename F>
void for_each_policy(const retry::PolicySet& policies, F&& f) {
  for (const retry::Policy& policy : policies.policies()) f(policy);
  const bool has_default =
      std::any_of(policies.policies().begin(), policies.policies().end(),
                  [](const retry::Policy& policy) { return policy.queue == "*"; });
  if (!has_default) f(policies.fallback());
}
}  // namespace

std::vector<std::string> policy_warnings(const retry::PolicySet& policies) {
  std::vector<std::string> warnings;
  for_each_policy(policies, [&](const retry::Policy& policy) {
    for (const std::string& warning : policy.warnings) warnings.push_back("warning: " + warning);
    // A limit the policy names: from x-delivery-count limit - 1 on nackguard republishes, as
    // one more return, and one the consumer never sees, could pass it (retry::kUnseenReturns).
    // An automatic limit is the management API's or an assumed one (choosing-a-policy.md).
    const retry::BrokerDeliveryLimit& limit = policy.broker_delivery_limit;
    if (limit.kind != retry::BrokerDeliveryLimit::Kind::fixed) return;
    if (policy.max_redeliveries + retry::kUnseenReturns < limit.value) return;
    warnings.push_back(
        "warning: " + policy.source +
        ": max_redeliveries: " + std::to_string(policy.max_redeliveries) +
        " reaches broker_delivery_limit: " + std::to_string(limit.value) +
        " (less one return the consumer may never see); before a return could pass the "
        "broker's limit nackguard republishes the message to the back of its queue with its "
        "count, so none is dropped, but its order changes. Lower max_redeliveries below it");
  });
  return warnings;
}

std::vector<std::string> policy_notes(const retry::PolicySet& policies) {
  std::vector<std::string> notes;
  for_each_policy(policies, [&](const retry::Policy& policy) {
    if (policy.ack_timeout.count() != 0) return;
    notes.push_back("note: " + policy.source +
                    ": ack_timeout is off. RabbitMQ 4.3 has no consumer timeout on classic "
                    "queues: there, nothing bounds a consumer that hangs on a message (3.x and "
                    "4.0 close its channel after consumer_timeout, 30 minutes by default). Set "
                    "ack_timeout for such queues (docs/choosing-a-policy.md#hung-consumers)");
  });
  return notes;
}

}  // namespace nackguard::config
