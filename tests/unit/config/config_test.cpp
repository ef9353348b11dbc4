#include "proxy/config/config.hpp"

#include <gtest/gtest.h>

#include "config/config_test_support.hpp"

namespace nackguard::config {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using testing::TempTree;

const fs::path kSourceDir = NACKGUARD_SOURCE_DIR;

// The settings these tests read back, but the file's own path and the policies folder, which
// depend on where the file is.
struct Settings {
  const char* listen_host;
  std::uint16_t listen_port;
  const char* upstream_host;
  std::uint16_t upstream_port;
  milliseconds connect_timeout;
  unsigned threads;
  const char* metrics_host;
  std::uint16_t metrics_port;
  bool show_identities;
  const char* log_level;
  const char* log_format;
  std::uint32_t max_frame_bytes;
  std::size_t buffer_bytes;
  std::uint64_t retained_body_bytes;
  milliseconds handshake_timeout;
  std::size_t tracker_max_entries;
  milliseconds tracker_idle_ttl;
  bool reload_watch;
};

void expect_settings(const Config& config, const Settings& want) {
  EXPECT_EQ(config.listen.host, want.listen_host);
  EXPECT_EQ(config.listen.port, want.listen_port);
  EXPECT_EQ(config.upstream.host, want.upstream_host);
  EXPECT_EQ(config.upstream.port, want.upstream_port);
  EXPECT_EQ(config.upstream_connect_timeout, want.connect_timeout);
  EXPECT_EQ(config.threads, want.threads);
  EXPECT_EQ(config.metrics.host, want.metrics_host);
  EXPECT_EQ(config.metrics.port, want.metrics_port);
  EXPECT_EQ(config.metrics_show_identities, want.show_identities);
  EXPECT_EQ(config.log_level, want.log_level);
  EXPECT_EQ(config.log_format, want.log_format);
  EXPECT_EQ(config.max_frame_bytes, want.max_frame_bytes);
  EXPECT_EQ(config.buffer_bytes, want.buffer_bytes);
  EXPECT_EQ(config.retained_body_bytes, want.retained_body_bytes);
  EXPECT_EQ(config.handshake_timeout, want.handshake_timeout);
  EXPECT_EQ(config.tracker_max_entries, want.tracker_max_entries);
  EXPECT_EQ(config.tracker_idle_ttl, want.tracker_idle_ttl);
  EXPECT_EQ(config.reload_watch, want.reload_watch);
}

// The documented values: the defaults, which the shipped file sets too.
const Settings kDocumented{.listen_host = "127.0.0.1",
                           .listen_port = 5673,
                           .upstream_host = "127.0.0.1",
                           .upstream_port = 5672,
                           .connect_timeout = milliseconds(5000),
                           .threads = 1,
                           .metrics_host = "127.0.0.1",
                           .metrics_port = 9464,
                           .show_identities = false,
                           .log_level = "info",
                           .log_format = "text",
                           .max_frame_bytes = 1048576,
                           .buffer_bytes = 1048576,
                           .retained_body_bytes = 268435456,
                           .handshake_timeout = milliseconds(10000),
                           .tracker_max_entries = 100000,
                           .tracker_idle_ttl = std::chrono::hours(24),
                           .reload_watch = true};

TEST(LoadConfig, ShippedFileGivesTheDocumentedValues) {
  const Config config = load_config(kSourceDir / "conf" / "nackguard.yaml");

  EXPECT_EQ(config.file, (kSourceDir / "conf" / "nackguard.yaml").lexically_normal());
  EXPECT_EQ(config.policies_dir, (kSourceDir / "policies").lexically_normal());
  expect_settings(config, kDocumented);
}

TEST(LoadConfig, ShippedFileSetsTheSameValuesAsTheDefaults) {
  // The shipped file documents the defaults; they must not drift apart. Only threads differs,
  // because its default depends on the machine.
  TempTree tree;
  Config defaults = load_config(tree.write(""));
  Config shipped = load_config(kSourceDir / "conf" / "nackguard.yaml");
  defaults.threads = shipped.threads;
  defaults.file = shipped.file;
  defaults.policies_dir = shipped.policies_dir;
  EXPECT_EQ(describe(defaults), describe(shipped));
}

TEST(LoadConfig, EmptyFileMeansAllDefaults) {
  TempTree tree;
  const fs::path file = tree.write("");
  const Config config = load_config(file);

  EXPECT_EQ(config.file, file);
  EXPECT_EQ(config.policies_dir, tree.root() / "policies");
  expect_settings(config, kDocumented);
}

TEST(LoadConfig, CommentsOnlyOrEmptySectionsMeanDefaults) {
  TempTree tree;
  EXPECT_EQ(load_config(tree.write("# nothing set\n")).listen.port, 5673);
  EXPECT_EQ(load_config(tree.write("---\n")).listen.port, 5673);
  const Config config = load_config(tree.write("listen:\nlimits: {}\ntimeouts:\n"));
  EXPECT_EQ(config.listen.port, 5673);
  EXPECT_EQ(config.handshake_timeout, milliseconds(10000));
}

TEST(LoadConfig, MinimalFileKeepsDefaultsForTheRest) {
  TempTree tree;
  const Config config = load_config(tree.write("listen: {port: 6000}\n"));
  EXPECT_EQ(config.listen.host, "127.0.0.1");
  EXPECT_EQ(config.listen.port, 6000);
  EXPECT_EQ(config.upstream.port, 5672);
  EXPECT_EQ(config.log_level, "info");
}

TEST(LoadConfig, ReadsEveryKey) {
  TempTree tree;
  fs::create_directories(tree.root() / "rules");
  const Config config = load_config(tree.write(R"(
listen:   {address: 0.0.0.0, port: 1}
upstream: {host: rabbit.internal, port: 65535, connect_timeout: 750ms}
threads: 256
policies_dir: ../rules
metrics:  {address: "::", port: 9000, show_identities: true}
log:      {level: critical, format: json}
limits:   {max_frame_bytes: 4096, buffer_bytes: 268435456, retained_body_bytes: 68719476736}
timeouts: {handshake: 2m}
tracker:  {max_entries: 100000000, idle_ttl: 8760h}
reload:   {watch: false}
)"));
  EXPECT_EQ(config.policies_dir, tree.root() / "rules");
  expect_settings(config, {.listen_host = "0.0.0.0",
                           .listen_port = 1,
                           .upstream_host = "rabbit.internal",
                           .upstream_port = 65535,
                           .connect_timeout = milliseconds(750),
                           .threads = 256,
                           .metrics_host = "::",
                           .metrics_port = 9000,
                           .show_identities = true,
                           .log_level = "critical",
                           .log_format = "json",
                           .max_frame_bytes = 4096,
                           .buffer_bytes = 268435456,
                           .retained_body_bytes = 68719476736u,
                           .handshake_timeout = milliseconds(120'000),
                           .tracker_max_entries = 100'000'000,
                           .tracker_idle_ttl = std::chrono::hours(8760),
                           .reload_watch = false});
}

TEST(LoadConfig, LowestTrackerAndRetentionValues) {
  TempTree tree;
  const Config config = load_config(
      tree.write("limits: {retained_body_bytes: 0}\ntracker: {max_entries: 1, idle_ttl: 1s}\n"));
  EXPECT_EQ(config.retained_body_bytes, 0u);
  EXPECT_EQ(config.tracker_max_entries, 1u);
  EXPECT_EQ(config.tracker_idle_ttl, milliseconds(1000));
}

TEST(LoadConfig, AbsolutePoliciesDirIsKeptAsIs) {
  TempTree tree;
  const fs::path elsewhere = tree.root() / "elsewhere";
  fs::create_directories(elsewhere);
  const Config config = load_config(tree.write("policies_dir: " + elsewhere.string() + "\n"));
  EXPECT_EQ(config.policies_dir, elsewhere);
}

TEST(LoadConfig, RelativeFileNameIsMadeAbsolute) {
  TempTree tree;
  tree.write("threads: 3\n");
  const fs::path previous = fs::current_path();
  fs::current_path(tree.root());
  const Config config = load_config("conf/nackguard.yaml");
  fs::current_path(previous);
  EXPECT_EQ(config.file, tree.root() / "conf" / "nackguard.yaml");
  EXPECT_EQ(config.policies_dir, tree.root() / "policies");
  EXPECT_EQ(config.threads, 3u);
}

TEST(ParseConfig, ResolvesPoliciesDirFromTheNamedFile) {
  TempTree tree;
  const Config config = parse_config("threads: 1\n", tree.root() / "conf" / "any.yaml");
  EXPECT_EQ(config.file, tree.root() / "conf" / "any.yaml");
  EXPECT_EQ(config.policies_dir, tree.root() / "policies");
  EXPECT_EQ(config.threads, 1u);
}

TEST(ParseConfig, AcceptsQuotedScalars) {
  TempTree tree;
  const Config config = parse_config("listen: {port: \"5700\"}\nlog: {level: 'debug'}\n",
                                     tree.root() / "conf/x.yaml");
  EXPECT_EQ(config.listen.port, 5700);
  EXPECT_EQ(config.log_level, "debug");
}

TEST(Describe, ListsEveryKeyOncePerLine) {
  TempTree tree;
  const fs::path file = tree.write("threads: 4\nupstream: {connect_timeout: 1500ms}\n");
  const std::string expected = "file: " + file.string() +
                               "\n"
                               "listen.address: 127.0.0.1\n"
                               "listen.port: 5673\n"
                               "upstream.host: 127.0.0.1\n"
                               "upstream.port: 5672\n"
                               "upstream.connect_timeout: 1500ms\n"
                               "threads: 4\n"
                               "policies_dir: " +
                               (tree.root() / "policies").string() +
                               "\n"
                               "metrics.address: 127.0.0.1\n"
                               "metrics.port: 9464\n"
                               "metrics.max_queue_labels: 100\n"
                               "metrics.show_identities: false\n"
                               "log.level: info\n"
                               "log.format: text\n"
                               "limits.max_frame_bytes: 1048576\n"
                               "limits.buffer_bytes: 1048576\n"
                               "limits.retained_body_bytes: 268435456\n"
                               "timeouts.handshake: 10s\n"
                               "shutdown.grace: 30s\n"
                               "reload.watch: true\n"
                               "tracker.max_entries: 100000\n"
                               "tracker.idle_ttl: 24h\n";
  EXPECT_EQ(describe(load_config(file)), expected);
}

}  // namespace
}  // namespace nackguard::config
