#include "proxy/config/config.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <system_error>

#include "proxy/config/management_section.hpp"
#include "proxy/config/tls_section.hpp"
#include "proxy/config/upstream_addresses.hpp"
#include "proxy/config/yaml_section.hpp"
#include "proxy/config/yaml_values.hpp"

namespace nackguard::config {
namespace {

namespace fs = std::filesystem;
using detail::Field;
using detail::Section;
using detail::Source;
using std::chrono::milliseconds;

constexpr unsigned kMaxThreads = 256;
// AMQP 0-9-1 forbids a frame_max below 4096; 16 MiB is far above any real message frame.
constexpr std::uint64_t kMinFrameBytes = 4096;
constexpr std::uint64_t kMaxFrameBytes = 16 * 1024 * 1024;
// Below 64 KiB a connection stalls on every burst; above 256 MiB a few slow peers exhaust
// memory.
constexpr std::uint64_t kMinBufferBytes = 64 * 1024;
constexpr std::uint64_t kMaxBufferBytes = 256 * 1024 * 1024;
// 64 GiB: beyond any machine this runs on, yet small enough to catch a value typed in bits or
// with extra zeros.
constexpr std::uint64_t kMaxRetainedBodyBytes = 64ULL * 1024 * 1024 * 1024;
// Each tracker entry takes a fixed, small amount of memory; 10^8 of them is already several GiB.
constexpr std::uint64_t kMaxTrackerEntries = 100'000'000;

constexpr std::array<std::string_view, 11> kTopKeys{
    "listen", "upstream", "threads", "policies_dir", "metrics", "log",
    "limits", "timeouts", "tracker", "shutdown",     "reload"};
constexpr std::array<std::string_view, 3> kListenKeys{"address", "port", "tls"};
constexpr std::array<std::string_view, 6> kUpstreamKeys{
    "host", "port", "addresses", "connect_timeout", "tls", "management"};
constexpr std::array<std::string_view, 4> kMetricsKeys{"address", "port", "max_queue_labels",
                                                       "show_identities"};
constexpr std::array<std::string_view, 1> kShutdownKeys{"grace"};
constexpr std::array<std::string_view, 1> kReloadKeys{"watch"};
constexpr std::uint64_t kMaxQueueLabels = 100000;
constexpr std::array<std::string_view, 2> kLogKeys{"level", "format"};
constexpr std::array<std::string_view, 3> kLimitsKeys{"max_frame_bytes", "buffer_bytes",
                                                      "retained_body_bytes"};
constexpr std::array<std::string_view, 1> kTimeoutsKeys{"handshake"};
constexpr std::array<std::string_view, 2> kTrackerKeys{"max_entries", "idle_ttl"};

constexpr std::array<std::string_view, 7> kLogLevels{"trace", "debug",    "info", "warn",
                                                     "error", "critical", "off"};
constexpr std::array<std::string_view, 2> kLogFormats{"text", "json"};

// A timer set further out than a day is a mistake, and values near the limit of milliseconds
// would overflow when a timer adds them to the clock.
constexpr milliseconds kLongestTimeout = std::chrono::hours(24);
// A message returned less often than every idle_ttl loses its count, so the lower bound only
// stops nonsense; a year is the most a count is worth keeping.
constexpr milliseconds kShortestIdleTtl = std::chrono::seconds(1);
constexpr milliseconds kLongestIdleTtl = std::chrono::hours(24 * 365);

YAML::Node parse_single_document(const Source& source, std::string_view yaml_text) {
  const std::vector<YAML::Node> documents = load_documents(source, yaml_text);
  if (documents.empty()) return YAML::Node();  // empty, or only comments: all defaults
  if (documents.size() > 1) {
    source.fail(documents[1].Mark(), "",
                "the file holds more than one YAML document (\"---\" starts another); keep all "
                "settings in the first one");
  }
  return documents.front();
}

void read_endpoint(const Section& section, std::string_view host_key, Endpoint& endpoint) {
  if (const Field* host = section.find(host_key)) {
    endpoint.host = detail::read_word(*host, "a host name or IP address");
  }
  if (const Field* port = section.find("port")) endpoint.port = detail::read_port(*port);
}

fs::path absolute_or_as_given(const fs::path& file) {
  std::error_code ignored;
  const fs::path absolute = fs::absolute(file, ignored);
  return absolute.empty() ? file : absolute.lexically_normal();
}

// Resolved against the path of the file as named, without following symbolic links: a mounted
// config (e.g. a Kubernetes ConfigMap, whose files are links into a hidden directory) should
// find "../policies" where its visible path says.
fs::path resolve_policies_dir(const fs::path& config_file, const fs::path& value) {
  if (value.is_absolute()) return value.lexically_normal();
  return (config_file.parent_path() / value).lexically_normal();
}

// Why the path is what it is, so that a person can see whether the value or its base is wrong.
std::string explain_origin(const Field* field, const fs::path& as_written,
                           const fs::path& config_file) {
  std::string origin = field ? "set to \"" : "the default \"";
  origin += as_written.string() + "\"";
  if (as_written.is_relative()) origin += ", relative to " + config_file.parent_path().string();
  return origin;
}

void check_policies_dir(const Source& source, const Field* field, const Config& config,
                        const fs::path& as_written) {
  const std::string resolved = config.policies_dir.string();
  std::error_code error;
  const fs::file_status status = fs::status(config.policies_dir, error);
  std::string problem;
  if (status.type() == fs::file_type::not_found) {
    problem = "the directory " + resolved + " does not exist";
  } else if (error) {
    problem = "cannot check the directory " + resolved + ": " + error.message();
  } else if (status.type() != fs::file_type::directory) {
    problem = resolved + " is not a directory";
  } else {
    return;
  }
  const YAML::Mark mark = field ? field->value_mark() : YAML::Mark::null_mark();
  source.fail(mark, "policies_dir",
              problem + " (" + explain_origin(field, as_written, config.file) +
                  "); create it, or set policies_dir to the directory that holds the policy "
                  "files");
}

void read_policies_dir(const Source& source, const Section& top, Config& config) {
  const Field* field = top.find("policies_dir");
  fs::path value = config.policies_dir;
  if (field != nullptr) {
    const std::string text = field->scalar("a directory path");
    if (text.empty()) field->fail("expected a directory path, got an empty string");
    value = text;
  }
  config.policies_dir = resolve_policies_dir(config.file, value);
  check_policies_dir(source, field, config, value);
}

void read_listen(const Source& source, const Section& top, Config& config) {
  const Section listen = top.child("listen", kListenKeys);
  read_endpoint(listen, "address", config.listen);
  detail::read_listen_tls(source, listen, config);
}

void read_upstream(const Source& source, const Section& top, Config& config) {
  const Section upstream = top.child("upstream", kUpstreamKeys);
  read_endpoint(upstream, "host", config.upstream);
  detail::read_upstream_addresses(source, upstream, config);
  if (const Field* timeout = upstream.find("connect_timeout")) {
    config.upstream_connect_timeout =
        detail::read_duration(*timeout, milliseconds(1), kLongestTimeout);
  }
  detail::read_upstream_tls(source, upstream, config);
  detail::read_upstream_management(source, upstream, config);
}

void read_log(const Section& top, Config& config) {
  const Section log = top.child("log", kLogKeys);
  if (const Field* level = log.find("level")) {
    config.log_level = detail::read_choice(*level, kLogLevels);
  }
  if (const Field* format = log.find("format")) {
    config.log_format = detail::read_choice(*format, kLogFormats);
  }
}

void read_limits(const Section& top, Config& config) {
  const Section limits = top.child("limits", kLimitsKeys);
  if (const Field* frame = limits.find("max_frame_bytes")) {
    config.max_frame_bytes = static_cast<std::uint32_t>(
        detail::read_integer(*frame, kMinFrameBytes, kMaxFrameBytes, "a number of bytes"));
  }
  if (const Field* buffer = limits.find("buffer_bytes")) {
    config.buffer_bytes = static_cast<std::size_t>(
        detail::read_integer(*buffer, kMinBufferBytes, kMaxBufferBytes, "a number of bytes"));
  }
  if (const Field* retained = limits.find("retained_body_bytes")) {
    config.retained_body_bytes =
        detail::read_integer(*retained, 0, kMaxRetainedBodyBytes, "a number of bytes");
  }
}

void read_timeouts(const Section& top, Config& config) {
  const Section timeouts = top.child("timeouts", kTimeoutsKeys);
  if (const Field* handshake = timeouts.find("handshake")) {
    config.handshake_timeout = detail::read_duration(*handshake, milliseconds(1), kLongestTimeout);
  }
}

void read_shutdown(const Section& top, Config& config) {
  const Section shutdown = top.child("shutdown", kShutdownKeys);
  if (const Field* grace = shutdown.find("grace")) {
    config.shutdown_grace = detail::read_duration(*grace, milliseconds(0), kLongestTimeout);
  }
}

void read_reload(const Section& top, Config& config) {
  const Section reload = top.child("reload", kReloadKeys);
  if (const Field* watch = reload.find("watch")) {
    config.reload_watch = detail::read_bool(*watch);
  }
}

void read_metrics(const Section& top, Config& config) {
  const Section metrics = top.child("metrics", kMetricsKeys);
  read_endpoint(metrics, "address", config.metrics);
  if (const Field* labels = metrics.find("max_queue_labels")) {
    config.metrics_max_queue_labels =
        static_cast<std::size_t>(detail::read_integer(*labels, 1, kMaxQueueLabels));
  }
  if (const Field* show = metrics.find("show_identities")) {
    config.metrics_show_identities = detail::read_bool(*show);
  }
}

void read_tracker(const Section& top, Config& config) {
  const Section tracker = top.child("tracker", kTrackerKeys);
  if (const Field* entries = tracker.find("max_entries")) {
    config.tracker_max_entries =
        static_cast<std::size_t>(detail::read_integer(*entries, 1, kMaxTrackerEntries));
  }
  if (const Field* ttl = tracker.find("idle_ttl")) {
    config.tracker_idle_ttl = detail::read_duration(*ttl, kShortestIdleTtl, kLongestIdleTtl);
  }
}

Config build_config(const Source& source, const YAML::Node& document,
                    const fs::path& file_for_messages) {
  Config config;
  config.file = absolute_or_as_given(file_for_messages);
  const Section top = Section::top_level(source, document, kTopKeys);

  read_listen(source, top, config);
  read_upstream(source, top, config);
  if (const Field* threads = top.find("threads")) {
    config.threads = static_cast<unsigned>(detail::read_integer(*threads, 1, kMaxThreads));
  }
  read_metrics(top, config);
  read_log(top, config);
  read_limits(top, config);
  read_timeouts(top, config);
  read_tracker(top, config);
  read_shutdown(top, config);
  read_reload(top, config);
  // Last, so that a typo elsewhere is reported before a missing directory.
  read_policies_dir(source, top, config);
  return config;
}

}  // namespace

std::vector<Endpoint> upstream_targets(const Config& config) {
  if (!config.upstream_addresses.empty()) return config.upstream_addresses;
  return {config.upstream};
}

std::string to_string(const Endpoint& endpoint) {
  const bool v6 = endpoint.host.find(':') != std::string::npos;
  return (v6 ? "[" + endpoint.host + "]" : endpoint.host) + ":" + std::to_string(endpoint.port);
}

Config parse_config(std::string_view yaml_text, const fs::path& file_for_messages) {
  const Source source(file_for_messages.string());
  try {
    return build_config(source, parse_single_document(source, yaml_text), file_for_messages);
  } catch (const YAML::Exception& error) {
    // Reading a node the checks above already typed should not throw; if yaml-cpp disagrees,
    // the person still gets a located message, not "yaml-cpp: bad conversion".
    source.fail(error.mark, "", "cannot read this YAML: " + error.msg);
  }
}

Config load_config(const fs::path& file) {
  return parse_config(detail::read_text_file(file, "config file"), file);
}

namespace detail {

std::string read_text_file(const fs::path& file, std::string_view what) {
  std::string cannot_read = ": cannot read the ";
  cannot_read.append(what).append(": ");
  const std::string name = file.string();
  std::error_code error;
  const fs::file_status status = fs::status(file, error);
  if (status.type() == fs::file_type::not_found) {
    throw ConfigError(name + cannot_read + "it does not exist (looked for " +
                      absolute_or_as_given(file).string() +
                      "); check the path, which is relative to the current directory");
  }
  if (status.type() == fs::file_type::directory) {
    throw ConfigError(name + cannot_read +
                      "it is a directory; give the path of the YAML file itself");
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    throw ConfigError(name + cannot_read + std::strerror(errno) +
                      "; check that it exists and that this user may read it");
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    throw ConfigError(name + cannot_read + std::strerror(errno) +
                      "; check the file and the disk it is on");
  }
  return std::move(text).str();
}

}  // namespace detail

}  // namespace nackguard::config
