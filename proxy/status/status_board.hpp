#pragma once
// What /status and /status.json show: the live view of what is looping now. It reads the
// shared guard state (the tracker by sampling, under its shards' locks, for a bounded number
// of entries), the registry's counters, and what the App tells it of its config and reloads.
// No I/O: the App calls tick() from a timer and json() from the metrics endpoint.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "proxy/metrics/registry.hpp"
#include "proxy/retry/guard_context.hpp"
#include "proxy/retry/tracker_names.hpp"
#include "proxy/status/queue_limits.hpp"
#include "proxy/status/queue_window.hpp"

namespace nackguard::status {

// Bounds of the page: the messages and queues listed, and the tracker entries read per shard.
inline constexpr std::size_t kTopMessages = 50;
inline constexpr std::size_t kMaxQueues = 100;
inline constexpr std::size_t kVisitPerShard = 2048;

struct StatusConfig {
  std::string file;          // the config file
  std::string policies_dir;  // where the policies in force came from
  std::size_t policies = 0;  // policy files in force
  bool show_identities = false;
  std::size_t max_queue_labels = 100;
};

struct ReloadRecord {
  std::int64_t wall_ms = 0;
  bool ok = true;
  std::string message;  // why it failed; empty when it did not
};

class StatusBoard {
 public:
  StatusBoard(retry::GuardContext& guard, const metrics::Registry& registry, std::string version,
              std::string host);

  void set_config(const StatusConfig& config);
  // Where "queue_limits" comes from, read on each json(); unset: none. Set before json() is
  // first called.
  void set_queue_limits(std::function<std::vector<QueueLimitRow>()> source);
  void reloaded(const ReloadRecord& record);
  // Takes a window snapshot when one is due; call every few seconds.
  void tick();
  // GET /status.json: the fields are documented in docs/operations.md ("/status").
  std::string json();

 private:
  retry::GuardContext& guard_;
  const metrics::Registry& registry_;
  const std::string version_;
  const std::string host_;
  const std::int64_t started_wall_ms_;
  std::function<std::vector<QueueLimitRow>()> queue_limits_;
  std::mutex mutex_;  // guards what follows
  StatusConfig config_;
  std::optional<ReloadRecord> last_reload_;
  QueueWindow window_;
};

}  // namespace nackguard::status
