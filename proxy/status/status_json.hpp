#pragma once
// The parts of /status.json, built on Boost.JSON from what StatusBoard collected.

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "proxy/retry/policy_set.hpp"
#include "proxy/retry/tracker.hpp"
#include "proxy/retry/tracker_names.hpp"
#include "proxy/status/queue_window.hpp"

namespace nackguard::retry {
class GuardContext;
}

namespace nackguard::status {

// "2026-12-03T10:15:02.345Z" for milliseconds since the epoch.
std::string iso_time_ms(std::int64_t wall_ms);

// The counts of one queue: deliveries, returns, what became of the returns, dead-letters by
// reason, fallbacks and ack timeouts.
boost::json::object counts_json(const QueueCounts& counts);

// Where `policy` was defined, relative to `policies_dir` when it lies there ("orders.yaml"),
// else as the loader wrote it ("built-in default").
std::string policy_file(const retry::Policy& policy, std::string_view policies_dir);

// One message of the top table. `name` is what TrackerNames knows of it (nullopt: forgotten);
// `next` says what its next return (or delivery, for a crash's pending decision) will bring.
boost::json::object message_json(const retry::Tracker::Sampled& sampled,
                                 const std::optional<retry::TrackerName>& name,
                                 bool show_identities, retry::GuardContext& guard,
                                 const retry::PolicySet& policies, std::string_view policies_dir);

}  // namespace nackguard::status
