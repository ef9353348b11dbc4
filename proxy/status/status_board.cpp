#include "proxy/status/status_board.hpp"

#include <map>

#include <boost/json/serialize.hpp>

#include <algorithm>

#include "proxy/status/status_json.hpp"

namespace nackguard::status {

namespace json = boost::json;

StatusBoard::StatusBoard(retry::GuardContext& guard, const metrics::Registry& registry,
                         std::string version, std::string host)
    : guard_(guard),
      registry_(registry),
      version_(std::move(version)),
      host_(std::move(host)),
      started_wall_ms_(guard.wall_ms()),
      window_(guard.steady_ms()) {}

void StatusBoard::set_config(const StatusConfig& config) {
  guard_.tracker_names().set_keep_identities(config.show_identities);
  const std::lock_guard lock(mutex_);
  config_ = config;
}

void StatusBoard::set_queue_limits(std::function<std::vector<QueueLimitRow>()> source) {
  queue_limits_ = std::move(source);
}

void StatusBoard::reloaded(const ReloadRecord& record) {
  const std::lock_guard lock(mutex_);
  last_reload_ = record;
}

void StatusBoard::tick() {
  std::vector<QueueCounts> counts = registry_.queue_counts();
  const std::lock_guard lock(mutex_);
  window_.observe(guard_.steady_ms(), counts);
}

namespace {

// The broker's delivery limit in force on `queue` as nackguard keeps messages from it, and
// where it has it from (retry::broker_delivery_limit): {"limit": N or null, "from": ...}.
json::object delivery_limit_json(const std::string& queue, const retry::Policy& policy,
                                 retry::GuardContext& guard,
                                 const std::map<std::string, retry::LimitInForce>& learnt) {
  auto it = learnt.find(queue);
  const retry::LimitInForce in_force = retry::broker_delivery_limit(
      policy.broker_delivery_limit, guard.queue_facts().find(queue),
      it == learnt.end() ? std::nullopt : std::optional<retry::LimitInForce>(it->second));
  return {{"limit", in_force.limit ? json::value(*in_force.limit) : json::value(nullptr)},
          {"from", retry::to_string(in_force.source)}};
}

json::object queue_json(const QueueCounts& total, const std::optional<QueueCounts>& window,
                        retry::GuardContext& guard, const retry::PolicySet& policies,
                        std::string_view policies_dir,
                        const std::map<std::string, retry::LimitInForce>& learnt) {
  json::object out;
  out["queue"] = total.queue;
  out["window"] = window ? json::value(counts_json(*window)) : json::value(nullptr);
  out["total"] = counts_json(total);
  out["outage"] = total.outage;
  if (total.queue == "_other") {
    out["outage_ratio"] = nullptr;
    out["policy"] = nullptr;
    out["delivery_limit"] = nullptr;
    return out;
  }
  const retry::Policy& policy = policies.match(total.queue);
  const retry::HealthChange health =
      guard.health().state(total.queue, policy.rate, guard.steady_ms());
  out["outage_ratio"] = health.messages > 0 ? json::value(health.ratio) : json::value(nullptr);
  out["policy"] = policy_file(policy, policies_dir);
  out["delivery_limit"] = delivery_limit_json(total.queue, policy, guard, learnt);
  return out;
}

// "config": the files in force, and the reloads.
json::object config_json(const StatusConfig& config, const std::optional<ReloadRecord>& last_reload,
                         const metrics::Registry& registry) {
  json::object reload = {{"ok", registry.policy_reloads(true)},
                         {"error", registry.policy_reloads(false)}};
  json::value last = nullptr;
  if (last_reload) {
    last = json::object{{"at", iso_time_ms(last_reload->wall_ms)},
                        {"result", last_reload->ok ? "ok" : "error"},
                        {"message", last_reload->message}};
  }
  return {{"file", config.file},          {"policies_dir", config.policies_dir},
          {"policies", config.policies},  {"show_identities", config.show_identities},
          {"reloads", std::move(reload)}, {"last_reload", std::move(last)}};
}

// "limits": each bound with what it holds now.
json::object limits_json(const StatusConfig& config, std::size_t queues, retry::GuardContext& guard,
                         const metrics::Registry& registry) {
  const retry::TrackerStats tracker = guard.tracker().stats();
  retry::BodyBudget& budget = guard.budget();
  return {{"tracker_entries", tracker.entries},
          {"tracker_max_entries", guard.tracker().max_entries()},
          {"tracker_evictions", tracker.evictions},
          {"retained_body_bytes", budget.used()},
          {"retained_body_bytes_limit", budget.limit()},
          {"retained_body_refusals", budget.refusals()},
          {"client_connections", registry.client_connections()},
          {"queues", queues},
          {"max_queue_labels", config.max_queue_labels}};
}

}  // namespace

std::string StatusBoard::json() {
  const std::int64_t now = guard_.steady_ms();
  const std::int64_t wall = guard_.wall_ms();
  std::vector<QueueCounts> totals = registry_.queue_counts();
  const std::shared_ptr<const retry::PolicySet> policies = guard_.policies();
  StatusConfig config;
  std::optional<ReloadRecord> last_reload;
  std::vector<std::pair<QueueCounts, std::optional<QueueCounts>>> queues;
  std::int64_t window_seconds = 0;
  {
    const std::lock_guard lock(mutex_);
    config = config_;
    last_reload = last_reload_;
    window_.observe(now, totals);
    window_seconds = window_.seconds(now);
    for (const QueueCounts& total : totals) queues.emplace_back(total, window_.delta(now, total));
  }
  // The busiest first: returns in the window, then since start.
  auto returns = [](const auto& q) { return q.second ? q.second->returns : 0; };
  std::sort(queues.begin(), queues.end(), [&](const auto& a, const auto& b) {
    if (returns(a) != returns(b)) return returns(a) > returns(b);
    return a.first.returns > b.first.returns;
  });

  json::object doc;
  doc["nackguard"] = {{"version", version_},
                      {"host", host_},
                      {"started_at", iso_time_ms(started_wall_ms_)},
                      {"now", iso_time_ms(wall)}};
  doc["config"] = config_json(config, last_reload, registry_);
  doc["limits"] = limits_json(config, totals.size(), guard_, registry_);

  doc["window_seconds"] = window_seconds;
  // What the management API said of each queue (the first vhost's, should several have it).
  std::map<std::string, retry::LimitInForce> learnt;
  for (const retry::LearntLimitRow& row : guard_.learnt_limits().rows(kMaxQueues)) {
    if (auto in_force = retry::in_force(row.limit)) learnt.emplace(row.key.queue, *in_force);
  }
  json::array queue_rows;
  for (std::size_t i = 0; i < queues.size() && i < kMaxQueues; ++i) {
    queue_rows.push_back(queue_json(queues[i].first, queues[i].second, guard_, *policies,
                                    config.policies_dir, learnt));
  }
  doc["queues"] = std::move(queue_rows);
  doc["queue_limits"] =
      queue_limits_json(queue_limits_ ? queue_limits_() : std::vector<QueueLimitRow>{});

  std::size_t visited = 0;
  json::array top;
  for (const retry::Tracker::Sampled& sampled :
       guard_.tracker().top(kTopMessages, kVisitPerShard, now, &visited)) {
    top.push_back(message_json(sampled, guard_.tracker_names().find(sampled.key),
                               config.show_identities, guard_, *policies, config.policies_dir));
  }
  doc["top"] = std::move(top);
  doc["tracker_sampled"] = visited;
  return json::serialize(doc) + "\n";
}

}  // namespace nackguard::status
