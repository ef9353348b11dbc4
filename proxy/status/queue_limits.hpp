#pragma once
// "queue_limits" in /status.json: per queue, the broker's delivery limit nackguard knows, where
// the broker takes it from, and where nackguard learnt it. Plain rows, so that every source of
// limits (the management API today) can add its own without the status knowing its insides.

#include <boost/json/array.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "proxy/retry/learnt_limits.hpp"

namespace nackguard::status {

struct QueueLimitRow {
  std::string vhost;
  std::string queue;
  std::string type;                    // "quorum", "classic", "stream" or "unknown"
  std::optional<std::uint32_t> limit;  // nullopt: none, or nothing known (see state)
  // Where the broker takes it from: "argument", "policy", "operator_policy", "policies" (a
  // policy and an operator policy), "broker_default" or "none".
  std::string source;
  std::string learnt_from;  // "management_api"
  // "known", "pending", "not_found" or "failed" (then limit and source are the last known).
  std::string state;
  std::optional<std::int64_t> learnt_wall_ms;  // when the answer came
  std::string error;                           // failed: what went wrong
};

// The rows of the management API's lookups; `steady_now` and `wall_now` turn their times into
// wall-clock ones.
std::vector<QueueLimitRow> management_rows(const std::vector<retry::LearntLimitRow>& rows,
                                           std::int64_t steady_now, std::int64_t wall_now);

boost::json::array queue_limits_json(const std::vector<QueueLimitRow>& rows);

}  // namespace nackguard::status
