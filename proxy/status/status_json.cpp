#include "proxy/status/status_json.hpp"

#include <ctime>
#include <random>

#include "proxy/metrics/metric_list.hpp"
#include "proxy/retry/decision.hpp"
#include "proxy/retry/guard_context.hpp"

namespace nackguard::status {

namespace json = boost::json;

std::string iso_time_ms(std::int64_t wall_ms) {
  const std::time_t seconds = static_cast<std::time_t>(wall_ms / 1000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[40];
  std::size_t n = std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &utc);
  std::snprintf(text + n, sizeof text - n, ".%03dZ", static_cast<int>(wall_ms % 1000));
  return text;
}

json::object counts_json(const QueueCounts& counts) {
  json::object out;
  out["deliveries"] = counts.deliveries;
  out["returns"] = counts.returns;
  json::object outcomes;
  for (std::size_t i = 0; i < counts.requeues.size(); ++i) {
    outcomes[metrics::kActionValues[i]] = counts.requeues[i];
  }
  out["returns_became"] = std::move(outcomes);
  json::object reasons;
  for (std::size_t i = 0; i < counts.dead_letters.size(); ++i) {
    reasons[metrics::kReasonValues[i]] = counts.dead_letters[i];
  }
  out["dead_letters"] = std::move(reasons);
  out["fallbacks"] = counts.fallbacks;
  out["ack_timeouts"] = counts.ack_timeouts;
  return out;
}

std::string policy_file(const retry::Policy& policy, std::string_view policies_dir) {
  std::string_view source = policy.source;
  if (!policies_dir.empty() && source.size() > policies_dir.size() &&
      source.substr(0, policies_dir.size()) == policies_dir && source[policies_dir.size()] == '/') {
    return std::string(source.substr(policies_dir.size() + 1));
  }
  return policy.source;
}

namespace {

std::string_view action_word(retry::Action action) {
  return action == retry::Action::forward ? "requeue" : retry::to_string(action);
}

json::object decision_json(const retry::Decision& decision, std::string_view when) {
  json::object next;
  next["action"] = action_word(decision.action);
  next["when"] = when;
  if (decision.action == retry::Action::delay) next["delay_ms"] = decision.delay.count();
  if (decision.action == retry::Action::dead_letter) {
    next["reason"] = retry::to_string(decision.reason);
  }
  return next;
}

// What the message's next return will bring, as the guard would decide it now (outside a
// crash, from nackguard's own count), or what its next delivery carries out when a crash left
// a decision pending.
json::object next_json(const retry::TrackerEntry& entry, std::string_view queue,
                       retry::GuardContext& guard, const retry::PolicySet& policies,
                       std::string_view policies_dir) {
  const retry::Policy& policy = policies.match(queue);
  if (entry.pending_action != retry::Action::forward) {
    retry::Decision pending;
    pending.action = entry.pending_action;
    pending.reason = entry.pending_reason;
    pending.delay = retry::Millis(entry.pending_delay_ms);
    return decision_json(pending, "next_delivery");
  }
  retry::ReturnEvent event;
  event.wall_ms = guard.wall_ms();
  event.steady_ms = guard.steady_ms();
  event.outage = guard.health().state(queue, policy.rate, event.steady_ms).holds_counts();
  // The return of the copy the entry counts on (the message as the broker holds it now).
  event.carried.copy_id = entry.copy_id;
  retry::TrackerEntry copy = entry;
  std::mt19937_64 rng(entry.returns);
  json::object next = decision_json(retry::decide_return(policy, copy, event, rng), "next_return");
  next["policy"] = policy_file(policy, policies_dir);
  return next;
}

}  // namespace

json::object message_json(const retry::Tracker::Sampled& sampled,
                          const std::optional<retry::TrackerName>& name, bool show_identities,
                          retry::GuardContext& guard, const retry::PolicySet& policies,
                          std::string_view policies_dir) {
  const retry::TrackerEntry& entry = sampled.entry;
  json::object out;
  out["id"] = retry::short_id(sampled.key);
  if (name) {
    out["queue"] = name->queue;
  } else {
    out["queue"] = nullptr;  // its name was forgotten (TrackerNames holds the most recent)
  }
  if (show_identities && name && !name->identity.empty()) out["identity"] = name->identity;
  out["returns"] = entry.returns;
  out["deliveries"] = entry.deliveries;
  out["first_return"] = entry.first_return_ms > 0 ? json::value(iso_time_ms(entry.first_return_ms))
                                                  : json::value(nullptr);
  out["last_return"] = entry.last_return_ms > 0 ? json::value(iso_time_ms(entry.last_return_ms))
                                                : json::value(nullptr);
  out["crash_suspect"] = entry.crash_suspect;
  if (name) {
    out["next"] = next_json(entry, name->queue, guard, policies, policies_dir);
  } else {
    out["next"] = nullptr;
  }
  return out;
}

}  // namespace nackguard::status
