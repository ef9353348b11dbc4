#pragma once
// Triage of a dead-letter queue: the keys its messages are grouped by (--group-by) and
// selected by (--where KEY=VALUE), and the window on their last return (--since, --until).
// Pure functions over the codec's types.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "proxy/amqp/properties.hpp"

namespace nackguard::replay {

struct TriageKey {
  enum class Kind { reason, queue, consumer, header, day };
  Kind kind = Kind::reason;
  std::string header;  // Kind::header: the header's name
  // As written on the command line: "reason", "header:task", "day".
  std::string name() const;
  bool operator==(const TriageKey&) const = default;
};

// "reason", "queue", "consumer", "day" or "header:NAME" (NAME not empty); nullopt otherwise.
std::optional<TriageKey> parse_key(std::string_view text);

// The message's value for `key`, printable on one line: x-nackguard-reason, -queue or
// -consumer; a header's value as text (strings as they are, numbers in decimal, booleans as
// true/false); the UTC day (YYYY-MM-DD) of x-nackguard-last-return. A message without it, or
// with a value of another type, gets "(no NAME)", e.g. "(no reason)", "(no header:task)".
std::string key_value(const TriageKey& key, const amqp::BasicProperties& properties);

// x-nackguard-first-return and x-nackguard-last-return, in seconds since the epoch.
std::optional<std::int64_t> first_return_s(const amqp::BasicProperties& properties);
std::optional<std::int64_t> last_return_s(const amqp::BasicProperties& properties);

// "30s", "15m", "2h", "7d": a positive whole number and a unit; nullopt otherwise.
std::optional<std::chrono::seconds> parse_duration(std::string_view text);

struct Condition {
  TriageKey key;
  std::string value;
};
// "KEY=VALUE" with a key parse_key takes (the value may be empty, or hold '=').
std::optional<Condition> parse_condition(std::string_view text);

// Which messages a run looks at: every condition holds, and the last return falls in the
// window (a message without x-nackguard-last-return is outside any window).
struct Selection {
  std::vector<Condition> where;
  std::optional<std::int64_t> since_s;  // last return at or after this (epoch seconds)
  std::optional<std::int64_t> until_s;  // last return at or before this
};
bool selected(const Selection& selection, const amqp::BasicProperties& properties);

// The group a message falls in: its value for each key, in order.
std::vector<std::string> group_of(const std::vector<TriageKey>& keys,
                                  const amqp::BasicProperties& properties);

// Seconds since the epoch as "2024-05-01T12:00:00Z".
std::string iso_time(std::int64_t seconds);

}  // namespace nackguard::replay
