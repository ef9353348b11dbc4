#include "proxy/replay/triage.hpp"

#include <charconv>
#include <cstdio>

#include "proxy/guard/header_names.hpp"
#include "proxy/replay/rewrite.hpp"

namespace nackguard::replay {

namespace {

constexpr std::string_view kHeaderPrefix = "header:";

// A header's value as text, or nullopt when it has none (absent, a table, an array, void).
std::optional<std::string> text_of(const amqp::FieldValue* value) {
  if (value == nullptr) return std::nullopt;
  if (const std::string* text = value->as_string()) return printable(*text, 200);
  if (const bool* flag = std::get_if<bool>(&value->value)) return *flag ? "true" : "false";
  if (value->type == 'T') return std::to_string(std::get<std::uint64_t>(value->value));
  if (std::optional<std::int64_t> n = value->as_int()) return std::to_string(*n);
  return std::nullopt;
}

std::optional<std::int64_t> seconds_of(const amqp::BasicProperties& properties,
                                       std::string_view name) {
  const amqp::FieldValue* value = header_of(properties, name);
  if (value == nullptr) return std::nullopt;
  if (value->type == 'T') {
    auto seconds = std::get<std::uint64_t>(value->value);
    if (seconds > static_cast<std::uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<std::int64_t>(seconds);
  }
  return value->as_int();
}

}  // namespace

std::string TriageKey::name() const {
  switch (kind) {
    case Kind::reason:
      return "reason";
    case Kind::queue:
      return "queue";
    case Kind::consumer:
      return "consumer";
    case Kind::header:
      return std::string(kHeaderPrefix) + header;
    case Kind::day:
      return "day";
  }
  return "?";
}

std::optional<TriageKey> parse_key(std::string_view text) {
  using Kind = TriageKey::Kind;
  if (text == "reason") return TriageKey{Kind::reason, {}};
  if (text == "queue") return TriageKey{Kind::queue, {}};
  if (text == "consumer") return TriageKey{Kind::consumer, {}};
  if (text == "day") return TriageKey{Kind::day, {}};
  if (text.starts_with(kHeaderPrefix) && text.size() > kHeaderPrefix.size()) {
    return TriageKey{Kind::header, std::string(text.substr(kHeaderPrefix.size()))};
  }
  return std::nullopt;
}

std::string key_value(const TriageKey& key, const amqp::BasicProperties& properties) {
  std::optional<std::string> value;
  switch (key.kind) {
    case TriageKey::Kind::reason:
      return reason_of(properties);  // "(no reason)" when absent
    case TriageKey::Kind::queue:
      value = text_of(header_of(properties, guard::kQueueHeader));
      break;
    case TriageKey::Kind::consumer:
      value = text_of(header_of(properties, guard::kConsumerHeader));
      break;
    case TriageKey::Kind::header:
      value = text_of(header_of(properties, key.header));
      break;
    case TriageKey::Kind::day:
      if (std::optional<std::int64_t> last = last_return_s(properties)) {
        value = iso_time(*last).substr(0, 10);
      }
      break;
  }
  return value ? *value : "(no " + key.name() + ")";
}

std::optional<std::int64_t> first_return_s(const amqp::BasicProperties& properties) {
  return seconds_of(properties, guard::kFirstReturnHeader);
}

std::optional<std::int64_t> last_return_s(const amqp::BasicProperties& properties) {
  return seconds_of(properties, guard::kLastReturnHeader);
}

std::optional<std::chrono::seconds> parse_duration(std::string_view text) {
  if (text.size() < 2) return std::nullopt;
  std::int64_t count = 0;
  const char* end = text.data() + text.size() - 1;
  auto [stop, ec] = std::from_chars(text.data(), end, count);
  if (ec != std::errc{} || stop != end || count <= 0) return std::nullopt;
  std::int64_t unit = 0;
  switch (text.back()) {
    case 's':
      unit = 1;
      break;
    case 'm':
      unit = 60;
      break;
    case 'h':
      unit = 3600;
      break;
    case 'd':
      unit = 86400;
      break;
    default:
      return std::nullopt;
  }
  if (count > INT64_MAX / unit / 2) return std::nullopt;
  return std::chrono::seconds(count * unit);
}

std::optional<Condition> parse_condition(std::string_view text) {
  std::size_t equals = text.find('=');
  if (equals == std::string_view::npos) return std::nullopt;
  std::optional<TriageKey> key = parse_key(text.substr(0, equals));
  if (!key) return std::nullopt;
  return Condition{*key, std::string(text.substr(equals + 1))};
}

bool selected(const Selection& selection, const amqp::BasicProperties& properties) {
  for (const Condition& condition : selection.where) {
    if (key_value(condition.key, properties) != condition.value) return false;
  }
  if (!selection.since_s && !selection.until_s) return true;
  std::optional<std::int64_t> last = last_return_s(properties);
  if (!last) return false;
  if (selection.since_s && *last < *selection.since_s) return false;
  if (selection.until_s && *last > *selection.until_s) return false;
  return true;
}

std::vector<std::string> group_of(const std::vector<TriageKey>& keys,
                                  const amqp::BasicProperties& properties) {
  std::vector<std::string> group;
  group.reserve(keys.size());
  for (const TriageKey& key : keys) group.push_back(key_value(key, properties));
  return group;
}

std::string iso_time(std::int64_t seconds) {
  using namespace std::chrono;
  const sys_seconds time{std::chrono::seconds(seconds)};
  const sys_days day = floor<days>(time);
  const year_month_day date{day};
  const hh_mm_ss<std::chrono::seconds> clock{time - day};
  char text[48];
  std::snprintf(text, sizeof text, "%04d-%02u-%02uT%02d:%02d:%02dZ", static_cast<int>(date.year()),
                static_cast<unsigned>(date.month()), static_cast<unsigned>(date.day()),
                static_cast<int>(clock.hours().count()), static_cast<int>(clock.minutes().count()),
                static_cast<int>(clock.seconds().count()));
  return text;
}

}  // namespace nackguard::replay
