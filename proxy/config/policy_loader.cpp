#include "proxy/config/policy_loader.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <optional>
#include <system_error>
#include <vector>

#include "proxy/config/duration.hpp"
#include "proxy/config/policy_identity.hpp"
#include "proxy/config/suggest.hpp"
#include "proxy/config/yaml_section.hpp"
#include "proxy/config/yaml_values.hpp"

namespace nackguard::config {
namespace {

namespace fs = std::filesystem;
using detail::check_name_length;
using detail::Field;
using detail::parse_fixed_decimal;
using detail::quote;
using detail::read_fraction;
using detail::read_identity;
using detail::Section;
using detail::Source;
using retry::Backoff;
using retry::DeadLetter;
using retry::Policy;
using std::chrono::milliseconds;

constexpr std::array<std::string_view, 10> kPolicyKeys{
    "queue",       "max_redeliveries",      "identity",   "requeue",    "backoff", "rate",
    "dead_letter", "broker_delivery_limit", "queue_type", "ack_timeout"};
constexpr std::array<std::string_view, 4> kBackoffKeys{"initial", "multiplier", "max", "jitter"};
// min_deliveries is the old name of min_messages, still read (with a warning).
constexpr std::array<std::string_view, 6> kRateKeys{
    "window", "per_message", "outage_ratio", "min_messages", "max_outage", "min_deliveries"};
constexpr std::array<std::string_view, 3> kDeadLetterKeys{"via", "exchange", "routing_key"};

constexpr std::array<std::string_view, 2> kRequeueModes{"immediate", "delayed"};
constexpr std::array<std::string_view, 2> kVias{"publish", "reject"};
constexpr std::array<std::string_view, 2> kJitterWords{"none", "full"};
constexpr std::array<std::string_view, 3> kQueueTypes{"same", "classic", "quorum"};
constexpr std::string_view kQueuePlaceholder = "{queue}";

constexpr std::uint64_t kMaxRedeliveries = 1'000'000;
constexpr std::uint64_t kMaxCount = 1'000'000;
constexpr double kMaxMultiplier = 100;
// A delay is a message waiting in a delay queue; past a day it is a lost message, not a retry.
constexpr milliseconds kLongestDelay = std::chrono::hours(24);
constexpr milliseconds kShortestWindow = std::chrono::seconds(1);
constexpr milliseconds kLongestWindow = std::chrono::hours(24);
constexpr milliseconds kLongestOutage = std::chrono::hours(7 * 24);
// The session checks acknowledgement timeouts once a second.
constexpr milliseconds kShortestAckTimeout = std::chrono::seconds(1);
constexpr milliseconds kLongestAckTimeout = std::chrono::hours(24);

// What load_policies needs beyond the policy: where its queue was named, for duplicates.
struct ParsedPolicy {
  Policy policy;
  std::string queue_location;
};

std::string read_queue(const Source& source, const YAML::Node& document, const Section& top) {
  const Field* field = top.find("queue");
  if (field == nullptr) {
    source.fail(document.Mark(), "queue",
                "missing; every policy file names the queue it applies to: add \"queue: <name>\" "
                "(an exact name, a glob with * and ? in quotes such as \"orders.*\", or \"*\" "
                "for the default policy)");
  }
  const std::string queue = field->scalar("a queue name, or a glob such as \"orders.*\"");
  if (queue.empty()) {
    field->fail("expected a queue name, got an empty string; write \"*\" for the default policy");
  }
  check_name_length(*field, queue, "queue names");
  return queue;
}

void read_jitter(const Field& field, Backoff& backoff) {
  const std::string expected = "none, full, or a fraction above 0 and at most 1 such as 0.2";
  const std::string text = field.scalar(expected);
  if (text == "none") {
    backoff.jitter = Backoff::Jitter::none;
    return;
  }
  if (text == "full") {
    backoff.jitter = Backoff::Jitter::full;
    return;
  }
  const std::optional<double> fraction = parse_fixed_decimal(text);
  if (fraction && *fraction > 0 && *fraction <= 1) {
    backoff.jitter = Backoff::Jitter::fraction;
    backoff.jitter_fraction = *fraction;
    return;
  }
  std::string message = "expected " + expected + ", got " + quote(text);
  if (fraction && *fraction == 0) {
    message += "; for no jitter write none";
  } else if (!text.empty() && text.back() == '%') {
    message += "; write a percentage as a fraction (20% is 0.2)";
  } else if (const auto suggestion = closest_match(text, kJitterWords)) {
    message += " (did you mean \"" + *suggestion + "\"?)";
  }
  field.fail(message);
}

void read_backoff(const Section& top, Backoff& backoff) {
  const Section section = top.child("backoff", kBackoffKeys);
  const Field* initial = section.find("initial");
  const Field* max = section.find("max");
  if (initial) backoff.initial = detail::read_duration(*initial, milliseconds(1), kLongestDelay);
  if (const Field* multiplier = section.find("multiplier")) {
    const std::string expected = "a number from 1 to 100, such as 2 or 1.5";
    const std::string text = multiplier->scalar(expected);
    const std::optional<double> value = parse_fixed_decimal(text);
    if (!value || *value < 1 || *value > kMaxMultiplier) {
      multiplier->fail("expected " + expected + ", got " + quote(text));
    }
    backoff.multiplier = *value;
  }
  if (max) backoff.max = detail::read_duration(*max, milliseconds(1), kLongestDelay);
  if (const Field* jitter = section.find("jitter")) read_jitter(*jitter, backoff);

  if (backoff.initial <= backoff.max) return;
  std::string message = "the first delay (" + format_duration(backoff.initial) +
                        ") is longer than backoff.max (" + format_duration(backoff.max);
  message += max ? ")" : ", the default)";
  message += "; lower backoff.initial or raise backoff.max";
  (initial ? initial : max)->fail(message);
}

void read_rate(const Source& source, const Section& top, Policy& policy) {
  retry::RateLimits& rate = policy.rate;
  const Section section = top.child("rate", kRateKeys);
  if (const Field* window = section.find("window")) {
    rate.window = detail::read_duration(*window, kShortestWindow, kLongestWindow);
  }
  if (const Field* per_message = section.find("per_message")) {
    rate.per_message = static_cast<std::uint32_t>(
        detail::read_integer(*per_message, 1, kMaxCount, "a number of returns"));
  }
  if (const Field* ratio = section.find("outage_ratio")) {
    rate.outage_ratio = read_fraction(*ratio, "such as 0.5");
  }
  const Field* minimum = section.find("min_messages");
  if (const Field* old_name = section.find("min_deliveries")) {
    if (minimum != nullptr) {
      old_name->fail("is the old name of rate.min_messages, which is set too; remove it");
    }
    minimum = old_name;
    policy.warnings.push_back(
        source.location(old_name->key_mark()) +
        ": rate.min_deliveries: renamed rate.min_messages (outage detection counts distinct "
        "messages, not deliveries); the old name still works, rename the key");
  }
  if (minimum != nullptr) {
    rate.min_messages = static_cast<std::uint32_t>(detail::read_integer(*minimum, 1, kMaxCount));
  }
  if (const Field* longest = section.find("max_outage")) {
    rate.max_outage = detail::read_duration(*longest, kShortestWindow, kLongestOutage);
  }
}

// "{queue}" is the only placeholder: any other brace is a typo such as "{queu}" or "{name}".
void check_routing_key(const Field& field, std::string_view key) {
  for (std::size_t at = key.find_first_of("{}"); at != std::string_view::npos;
       at = key.find_first_of("{}", at)) {
    if (key.substr(at, kQueuePlaceholder.size()) != kQueuePlaceholder) {
      field.fail("unknown placeholder in " + quote(key) + " at character " +
                 std::to_string(at + 1) + "; the only placeholder is {queue} (the queue's name)");
    }
    at += kQueuePlaceholder.size();
  }
}

// With via: reject the broker routes by the queue's own dead-letter settings, so an exchange or
// routing key here would be silently ignored.
void refuse_with_reject(const Field* field) {
  if (field == nullptr) return;
  field->fail(
      "has no effect with via: reject (the broker dead-letters through the queue's own "
      "x-dead-letter-exchange); remove it, or set via: publish");
}

void read_dead_letter(const Section& top, DeadLetter& dead_letter) {
  const Section section = top.child("dead_letter", kDeadLetterKeys);
  if (const Field* via = section.find("via")) {
    dead_letter.via = detail::read_choice(*via, kVias) == "reject" ? DeadLetter::Via::reject
                                                                   : DeadLetter::Via::publish;
  }
  const Field* exchange = section.find("exchange");
  const Field* routing_key = section.find("routing_key");
  if (dead_letter.via == DeadLetter::Via::reject) {
    refuse_with_reject(exchange);
    refuse_with_reject(routing_key);
    return;
  }
  if (exchange) {
    dead_letter.exchange =
        exchange->scalar("an exchange name in quotes (\"\" for the default exchange)");
    check_name_length(*exchange, dead_letter.exchange, "exchange names");
  }
  if (routing_key) {
    dead_letter.routing_key =
        routing_key->scalar("a routing key in quotes, such as \"{queue}.dlq\"");
    if (dead_letter.exchange.empty() && dead_letter.routing_key.empty()) {
      routing_key->fail(
          "is empty, but the default exchange (exchange: \"\") routes by routing key to the "
          "queue of that name; give the dead-letter queue's name, such as \"{queue}.dlq\"");
    }
    check_name_length(*routing_key, dead_letter.routing_key, "routing keys");
    check_routing_key(*routing_key, dead_letter.routing_key);
  }
}

// An integer, or none (the queue has no delivery limit); auto is the default written out.
retry::BrokerDeliveryLimit read_broker_limit(const Field& field) {
  const std::string expected = "a number of returns such as 20, none, or auto";
  const std::string text = field.scalar(expected);
  if (text == "none") return {retry::BrokerDeliveryLimit::Kind::none, 0};
  if (text == "auto") return {retry::BrokerDeliveryLimit::Kind::automatic, 0};
  if (text == "-1") {
    field.fail("expected " + expected + ", got -1; write none for a queue without a limit");
  }
  const auto value = detail::read_integer(field, 0, kMaxRedeliveries, "a number of returns");
  return {retry::BrokerDeliveryLimit::Kind::fixed, static_cast<std::uint32_t>(value)};
}

retry::QueueType read_queue_type(const Field& field) {
  const std::string choice = detail::read_choice(field, kQueueTypes);
  if (choice == "classic") return retry::QueueType::classic;
  if (choice == "quorum") return retry::QueueType::quorum;
  return retry::QueueType::same;
}

ParsedPolicy build_policy(const Source& source, const YAML::Node& document) {
  const Section top = Section::top_level(source, document, kPolicyKeys);
  ParsedPolicy parsed;
  Policy& policy = parsed.policy;
  policy.queue = read_queue(source, document, top);
  parsed.queue_location = source.location(top.find("queue")->value_mark());
  if (const Field* max = top.find("max_redeliveries")) {
    policy.max_redeliveries =
        static_cast<std::uint32_t>(detail::read_integer(*max, 0, kMaxRedeliveries));
  }
  if (const Field* identity = top.find("identity")) {
    policy.identity = read_identity(source, *identity);
  }
  if (const Field* requeue = top.find("requeue")) {
    policy.requeue = detail::read_choice(*requeue, kRequeueModes) == "delayed"
                         ? retry::RequeueMode::delayed
                         : retry::RequeueMode::immediate;
  }
  read_backoff(top, policy.backoff);
  read_rate(source, top, policy);
  read_dead_letter(top, policy.dead_letter);
  if (const Field* limit = top.find("broker_delivery_limit")) {
    policy.broker_delivery_limit = read_broker_limit(*limit);
  }
  if (const Field* type = top.find("queue_type")) policy.queue_type = read_queue_type(*type);
  if (const Field* timeout = top.find("ack_timeout")) {
    if (timeout->scalar("a duration such as 10m, or off") != "off") {
      policy.ack_timeout = detail::read_duration(*timeout, kShortestAckTimeout, kLongestAckTimeout);
    }
  }
  policy.source = source.file();
  return parsed;
}

YAML::Node parse_policy_document(const Source& source, std::string_view yaml_text) {
  const std::vector<YAML::Node> documents = load_documents(
      source, yaml_text,
      "; quote a value that starts with * or {, such as queue: \"*.dlq\" or routing_key: "
      "\"{queue}.dlq\"");
  if (documents.size() > 1) {
    source.fail(documents[1].Mark(), "",
                "the file holds more than one YAML document (\"---\" starts another); put each "
                "policy in a file of its own");
  }
  if (documents.empty() || documents.front().IsNull()) {
    source.fail(YAML::Mark::null_mark(), "",
                "the policy file is empty; write at least \"queue: <name>\", or remove the file");
  }
  return documents.front();
}

ParsedPolicy parse_policy_file(std::string_view yaml_text, const fs::path& file) {
  const Source source(file.string());
  try {
    return build_policy(source, parse_policy_document(source, yaml_text));
  } catch (const YAML::Exception& error) {
    // As in parse_config: a located message even if yaml-cpp refuses a read checked above.
    source.fail(error.mark, "", "cannot read this YAML: " + error.msg);
  }
}

[[noreturn]] void fail_directory(const fs::path& dir, std::string_view problem) {
  std::string message = dir.string();
  message.append(": cannot read the policies directory: ").append(problem);
  message.append(
      "; create it, or set policies_dir in the config file to the directory that "
      "holds the policy files");
  throw ConfigError(message);
}

// The policy files in `dir`, sorted by name so that the order (and so every message) is the
// same on every machine.
std::vector<fs::path> list_policy_files(const fs::path& dir) {
  std::error_code error;
  const fs::file_status status = fs::status(dir, error);
  if (status.type() == fs::file_type::not_found) fail_directory(dir, "it does not exist");
  if (error) fail_directory(dir, error.message());
  if (status.type() != fs::file_type::directory) fail_directory(dir, "it is not a directory");

  std::vector<fs::path> files;
  fs::directory_iterator it(dir, error);
  for (; !error && it != fs::directory_iterator(); it.increment(error)) {
    const fs::path name = it->path().filename();
    if (!is_policy_file_name(name)) continue;
    std::error_code ignored;
    if (it->is_directory(ignored)) continue;  // e.g. examples.yaml/: not a file to load
    if (it->is_symlink(ignored) && !it->exists(ignored)) {
      throw ConfigError(it->path().string() +
                        ": cannot read the policy file: it is a symbolic link to a file that "
                        "does not exist; fix the link, or remove it");
    }
    files.push_back(it->path());
  }
  if (error) fail_directory(dir, error.message());
  std::sort(files.begin(), files.end(),
            [](const fs::path& a, const fs::path& b) { return a.filename() < b.filename(); });
  return files;
}

}  // namespace

bool is_policy_file_name(const fs::path& name) {
  const std::string text = name.string();
  if (text.empty() || text.front() == '.') return false;  // hidden: editor and backup files
  return name.extension() == ".yaml" || name.extension() == ".yml";
}

Policy parse_policy(std::string_view yaml_text, const fs::path& file) {
  return parse_policy_file(yaml_text, file).policy;
}

retry::PolicySet load_policies(const fs::path& dir) {
  std::vector<ParsedPolicy> parsed;
  for (const fs::path& file : list_policy_files(dir)) {
    ParsedPolicy next = parse_policy_file(detail::read_text_file(file, "policy file"), file);
    const auto same_queue = [&](const ParsedPolicy& earlier) {
      return earlier.policy.queue == next.policy.queue;
    };
    const auto earlier = std::find_if(parsed.begin(), parsed.end(), same_queue);
    if (earlier != parsed.end()) {
      throw ConfigError(next.queue_location + ": queue: " + quote(next.policy.queue) +
                        " already has a policy, in " + earlier->queue_location +
                        "; a queue (or glob) takes one policy file: merge the two files, or "
                        "change the queue in one of them");
    }
    parsed.push_back(std::move(next));
  }
  if (parsed.empty()) return retry::PolicySet();
  std::vector<Policy> policies;
  policies.reserve(parsed.size());
  for (ParsedPolicy& entry : parsed) policies.push_back(std::move(entry.policy));
  return retry::PolicySet(std::move(policies));
}

}  // namespace nackguard::config
