// Every way a config file can be wrong, each asserting that the message names the file, the
// 1-based line and column, the full dotted key, and what to write instead.

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <string>

#include "config/config_test_support.hpp"
#include "proxy/config/config.hpp"

namespace nackguard::config {
namespace {

namespace fs = std::filesystem;
using testing::config_error_of;
using testing::contains;
using testing::InDirectory;
using testing::starts_with;
using testing::TempTree;

// Loads `text` from conf/nackguard.yaml in a fresh tree and returns the error, with the file's
// path replaced by "FILE" so that expectations read like the messages a person sees.
class ConfigErrors : public testing::ConfigFileTest {};

TEST_F(ConfigErrors, MessagesReadAsDocumented) {
  tree_.write(R"(listen:
  address: 127.0.0.1
  port: 99999
)",
              "ports.yaml");
  tree_.write(R"(listen:   {address: 127.0.0.1, port: 5673}
upstream: {host: 127.0.0.1, port: 5672}
policies_dir: ../policies
metrics:  {address: 127.0.0.1, port: 9464}
log:      {level: info, format: text}

thread: 2
)",
              "typo.yaml");
  const InDirectory in_tree(tree_.root());
  EXPECT_EQ(config_error_of([] { load_config("conf/ports.yaml"); }),
            "conf/ports.yaml:3:9: listen.port: expected an integer from 1 to 65535, got \"99999\"");
  EXPECT_EQ(
      config_error_of([] { load_config("conf/typo.yaml"); }),
      "conf/typo.yaml:7:1: unknown key \"thread\" (did you mean \"threads\"?); valid keys "
      "here: listen, upstream, threads, policies_dir, metrics, log, limits, timeouts, tracker, "
      "shutdown, reload");
}

// --- the file itself ---

TEST_F(ConfigErrors, MissingFileNamesThePath) {
  const fs::path missing = tree_.root() / "conf" / "missing.yaml";
  const std::string message = config_error_of([&] { load_config(missing); });
  EXPECT_EQ(message,
            missing.string() + ": cannot read the config file: it does not exist (looked for " +
                missing.string() + "); check the path, which is relative to the current directory");
}

TEST_F(ConfigErrors, MissingRelativeFileShowsWhereItWasLookedFor) {
  const InDirectory in_tree(tree_.root());
  const std::string message = config_error_of([] { load_config("conf/nope.yaml"); });
  EXPECT_TRUE(starts_with(message,
                          "conf/nope.yaml: cannot read the config file: it does not "
                          "exist (looked for " +
                              (tree_.root() / "conf" / "nope.yaml").string() + ")"))
      << message;
}

TEST_F(ConfigErrors, DirectoryInsteadOfFile) {
  const fs::path directory = tree_.root() / "conf";
  EXPECT_EQ(config_error_of([&] { load_config(directory); }),
            directory.string() +
                ": cannot read the config file: it is a directory; give the path of the YAML "
                "file itself");
}

TEST_F(ConfigErrors, UnreadableFile) {
  const fs::path file = tree_.write("threads: 2\n");
  fs::permissions(file, fs::perms::none);
  if (std::ifstream(file).is_open()) GTEST_SKIP() << "running as root: permissions are ignored";
  EXPECT_EQ(config_error_of([&] { load_config(file); }),
            file.string() +
                ": cannot read the config file: Permission denied; check that it exists and "
                "that this user may read it");
}

// --- YAML syntax ---

TEST_F(ConfigErrors, SyntaxErrorIsLocated) {
  const std::string message = error_for("threads: 2\nlisten: {address: 127.0.0.1, port: 5673\n");
  EXPECT_TRUE(starts_with(message, "FILE:3:1: invalid YAML: ")) << message;
  EXPECT_TRUE(contains(message, "fix the syntax at that spot")) << message;
}

TEST_F(ConfigErrors, TabIndentationIsLocated) {
  const std::string message = error_for("listen:\n\tport: 5673\n");
  EXPECT_TRUE(starts_with(message, "FILE:2:")) << message;
  EXPECT_TRUE(contains(message, "invalid YAML")) << message;
  EXPECT_TRUE(contains(message, "indent with spaces, not tabs")) << message;
}

TEST_F(ConfigErrors, BadIndentationIsLocated) {
  const std::string message = error_for("threads: 2\n  port: 5673\n");
  EXPECT_TRUE(starts_with(message, "FILE:2:7: invalid YAML: ")) << message;
}

TEST_F(ConfigErrors, UndefinedAliasIsLocated) {
  const std::string message = error_for("listen: {port: 5673}\nmetrics: *missing\n");
  EXPECT_TRUE(starts_with(message, "FILE:2:10: invalid YAML: ")) << message;
}

TEST_F(ConfigErrors, SecondDocumentIsRefused) {
  EXPECT_EQ(error_for("threads: 2\n---\nthreads: 3\n"),
            "FILE:3:1: the file holds more than one YAML document (\"---\" starts another); "
            "keep all settings in the first one");
}

// --- shapes ---

TEST_F(ConfigErrors, TopLevelMustBeAMap) {
  EXPECT_EQ(
      error_for("- listen\n"),
      "FILE:1:1: expected a map of settings (listen, upstream, threads, policies_dir, "
      "metrics, log, limits, timeouts, tracker, shutdown, reload) at the top level of the file, "
      "got a list");
  EXPECT_TRUE(starts_with(error_for("just words\n"), "FILE:1:1: expected a map of settings"));
}

TEST_F(ConfigErrors, SectionGivenAScalar) {
  EXPECT_EQ(error_for("threads: 2\nlisten: 5673\n"),
            "FILE:2:9: listen: expected a map with the keys address, port, tls, got the scalar "
            "\"5673\"; write it as \"key: value\" lines indented under listen, or as {key: "
            "value, ...}");
}

TEST_F(ConfigErrors, SectionGivenAList) {
  EXPECT_TRUE(starts_with(error_for("upstream: [127.0.0.1, 5672]\n"),
                          "FILE:1:11: upstream: expected a map with the keys host, port, "
                          "addresses, connect_timeout, tls, management, got a list"));
}

TEST_F(ConfigErrors, ScalarGivenAMap) {
  EXPECT_EQ(error_for("threads:\n  count: 2\n"),
            "FILE:2:3: threads: expected an integer from 1 to 256, got a map");
}

TEST_F(ConfigErrors, ScalarGivenNothingPointsAtTheKey) {
  EXPECT_EQ(error_for("log:\n  level:\n  format: text\n"),
            "FILE:2:3: log.level: expected one of trace, debug, info, warn, error, critical, "
            "off, got nothing");
}

TEST_F(ConfigErrors, KeyThatIsNotAName) {
  EXPECT_EQ(error_for("listen:\n  [port]: 5673\n"),
            "FILE:2:3: listen: expected a key name, got a list");
}

// --- unknown and repeated keys ---

TEST_F(ConfigErrors, UnknownNestedKeyGivesTheDottedKeyAndASuggestion) {
  EXPECT_EQ(error_for("listen:\n  adress: 0.0.0.0\n"),
            "FILE:2:3: unknown key \"listen.adress\" (did you mean \"address\"?); valid keys "
            "here: address, port, tls");
}

TEST_F(ConfigErrors, UnknownKeyInEachSection) {
  EXPECT_EQ(error_for("upstream: {adresses: [rabbit:5672]}\n"),
            "FILE:1:12: unknown key \"upstream.adresses\" (did you mean \"addresses\"?); valid "
            "keys here: host, port, addresses, connect_timeout, tls, management");
  EXPECT_TRUE(starts_with(error_for("metrics: {prot: 1}\n"),
                          "FILE:1:11: unknown key \"metrics.prot\" (did you mean \"port\"?)"));
  EXPECT_TRUE(starts_with(error_for("log: {lvl: info}\n"), "FILE:1:7: unknown key \"log.lvl\""));
  EXPECT_EQ(error_for("limits:\n  max_frame: 4096\n"),
            "FILE:2:3: unknown key \"limits.max_frame\" (did you mean \"max_frame_bytes\"?); "
            "valid keys here: max_frame_bytes, buffer_bytes, retained_body_bytes");
  EXPECT_EQ(error_for("timeouts:\n  handshake_timeout: 5s\n"),
            "FILE:2:3: unknown key \"timeouts.handshake_timeout\" (did you mean "
            "\"handshake\"?); valid keys here: handshake");
  EXPECT_EQ(error_for("tracker:\n  max_entry: 10\n"),
            "FILE:2:3: unknown key \"tracker.max_entry\" (did you mean \"max_entries\"?); "
            "valid keys here: max_entries, idle_ttl");
}

TEST_F(ConfigErrors, ShowIdentitiesTakesTrueOrFalse) {
  const std::string error = error_for("metrics:\n  show_identities: yes\n");
  EXPECT_TRUE(starts_with(error, "FILE:2:20: metrics.show_identities: ")) << error;
  EXPECT_TRUE(contains(error, "true")) << error;
  EXPECT_TRUE(contains(error, "false")) << error;
}

TEST_F(ConfigErrors, UnknownKeyWithoutACloseMatchHasNoSuggestion) {
  EXPECT_EQ(error_for("verbose: true\n"),
            "FILE:1:1: unknown key \"verbose\"; valid keys here: listen, upstream, threads, "
            "policies_dir, metrics, log, limits, timeouts, tracker, shutdown, reload");
}

TEST_F(ConfigErrors, DuplicateKey) {
  EXPECT_EQ(error_for("threads: 2\nlog: {level: info}\nthreads: 4\n"),
            "FILE:3:1: duplicate key \"threads\" (first set at line 1); keep only one of them");
  EXPECT_EQ(error_for("listen: {port: 1, port: 2}\n"),
            "FILE:1:19: duplicate key \"listen.port\" (first set at line 1); keep only one of "
            "them");
}

// --- values ---

struct BadValue {
  const char* name;
  const char* yaml;
  const char* message;  // after "FILE:"
};

class BadValues : public ConfigErrors, public ::testing::WithParamInterface<BadValue> {};

TEST_P(BadValues, AreRefusedWithPositionKeyAndRange) {
  EXPECT_EQ(error_for(GetParam().yaml), std::string("FILE:") + GetParam().message);
}

INSTANTIATE_TEST_SUITE_P(
    Table, BadValues,
    ::testing::Values(
        BadValue{"PortZero", "listen: {port: 0}",
                 "1:16: listen.port: expected an integer from 1 to 65535, got \"0\""},
        BadValue{"PortTooLarge", "upstream:\n  port: 65536",
                 "2:9: upstream.port: expected an integer from 1 to 65535, got \"65536\""},
        BadValue{"PortNegative", "metrics: {port: -1}",
                 "1:17: metrics.port: expected an integer from 1 to 65535, got \"-1\""},
        BadValue{"PortWord", "listen: {port: amqp}",
                 "1:16: listen.port: expected an integer from 1 to 65535, got \"amqp\""},
        BadValue{"PortFraction", "listen: {port: 5672.5}",
                 "1:16: listen.port: expected an integer from 1 to 65535, got \"5672.5\""},
        BadValue{"PortHex", "listen: {port: 0x1629}",
                 "1:16: listen.port: expected an integer from 1 to 65535, got \"0x1629\""},
        BadValue{"PortHuge", "listen: {port: 99999999999999999999999}",
                 "1:16: listen.port: expected an integer from 1 to 65535, got "
                 "\"99999999999999999999999\""},
        BadValue{"EmptyAddress", "listen: {address: ''}",
                 "1:19: listen.address: expected a host name or IP address, got \"\""},
        BadValue{"AddressWithSpace", "upstream: {host: 'rabbit one'}",
                 "1:18: upstream.host: expected a host name or IP address, got \"rabbit one\""},
        BadValue{"AddressAsList", "metrics: {address: [a, b]}",
                 "1:20: metrics.address: expected a host name or IP address, got a list"},
        BadValue{"ThreadsZero", "threads: 0",
                 "1:10: threads: expected an integer from 1 to 256, got \"0\""},
        BadValue{"ThreadsTooMany", "threads: 257",
                 "1:10: threads: expected an integer from 1 to 256, got \"257\""},
        BadValue{"ThreadsAuto", "threads: auto",
                 "1:10: threads: expected an integer from 1 to 256, got \"auto\""},
        BadValue{"LogLevelNearMiss", "log: {level: warning}",
                 "1:14: log.level: expected one of trace, debug, info, warn, error, critical, "
                 "off, got \"warning\" (did you mean \"warn\"?)"},
        BadValue{"LogLevelCase", "log: {level: INFO}",
                 "1:14: log.level: expected one of trace, debug, info, warn, error, critical, "
                 "off, got \"INFO\" (did you mean \"info\"?)"},
        BadValue{"LogLevelUnknown", "log: {level: verbose}",
                 "1:14: log.level: expected one of trace, debug, info, warn, error, critical, "
                 "off, got \"verbose\""},
        BadValue{"LogFormat", "log:\n  format: yaml",
                 "2:11: log.format: expected one of text, json, got \"yaml\""},
        BadValue{"DurationWithoutUnit", "upstream: {connect_timeout: 10}",
                 "1:29: upstream.connect_timeout: invalid duration \"10\": the unit is missing; "
                 "write a whole number followed by one of the units ms, s, m, h (e.g. "
                 "\"500ms\", \"10s\", \"5m\", \"24h\")"},
        BadValue{"DurationUnknownUnit", "timeouts:\n  handshake: 10x",
                 "2:14: timeouts.handshake: invalid duration \"10x\": unknown unit \"x\"; write "
                 "a whole number followed by one of the units ms, s, m, h (e.g. \"500ms\", "
                 "\"10s\", \"5m\", \"24h\")"},
        BadValue{"DurationZero", "timeouts: {handshake: 0s}",
                 "1:23: timeouts.handshake: expected a duration from 1ms to 24h, got \"0s\""},
        BadValue{"DurationTooLong", "upstream: {connect_timeout: 25h}",
                 "1:29: upstream.connect_timeout: expected a duration from 1ms to 24h, got "
                 "\"25h\""},
        BadValue{"DurationAsMap", "timeouts: {handshake: {s: 10}}",
                 "1:23: timeouts.handshake: expected a duration from 1ms to 24h such as "
                 "\"10s\", got a map"},
        BadValue{"FrameTooSmall", "limits: {max_frame_bytes: 4095}",
                 "1:27: limits.max_frame_bytes: expected a number of bytes from 4096 to "
                 "16777216, got \"4095\""},
        BadValue{"FrameTooLarge", "limits: {max_frame_bytes: 16777217}",
                 "1:27: limits.max_frame_bytes: expected a number of bytes from 4096 to "
                 "16777216, got \"16777217\""},
        BadValue{"BufferTooSmall", "limits:\n  buffer_bytes: 65535",
                 "2:17: limits.buffer_bytes: expected a number of bytes from 65536 to "
                 "268435456, got \"65535\""},
        BadValue{"BufferTooLarge", "limits: {buffer_bytes: 268435457}",
                 "1:24: limits.buffer_bytes: expected a number of bytes from 65536 to "
                 "268435456, got \"268435457\""},
        BadValue{"BufferWithSuffix", "limits: {buffer_bytes: 1MiB}",
                 "1:24: limits.buffer_bytes: expected a number of bytes from 65536 to "
                 "268435456, got \"1MiB\""},
        BadValue{"RetainedBodyTooLarge", "limits: {retained_body_bytes: 68719476737}",
                 "1:31: limits.retained_body_bytes: expected a number of bytes from 0 to "
                 "68719476736, got \"68719476737\""},
        BadValue{"RetainedBodyNegative", "limits:\n  retained_body_bytes: -1",
                 "2:24: limits.retained_body_bytes: expected a number of bytes from 0 to "
                 "68719476736, got \"-1\""},
        BadValue{"RetainedBodyWithSuffix", "limits: {retained_body_bytes: 256MiB}",
                 "1:31: limits.retained_body_bytes: expected a number of bytes from 0 to "
                 "68719476736, got \"256MiB\""},
        BadValue{"TrackerEntriesZero", "tracker: {max_entries: 0}",
                 "1:24: tracker.max_entries: expected an integer from 1 to 100000000, got \"0\""},
        BadValue{"TrackerEntriesTooMany", "tracker:\n  max_entries: 100000001",
                 "2:16: tracker.max_entries: expected an integer from 1 to 100000000, got "
                 "\"100000001\""},
        BadValue{"TrackerTtlTooShort", "tracker: {idle_ttl: 500ms}",
                 "1:21: tracker.idle_ttl: expected a duration from 1s to 8760h, got \"500ms\""},
        BadValue{"TrackerTtlTooLong", "tracker: {idle_ttl: 8761h}",
                 "1:21: tracker.idle_ttl: expected a duration from 1s to 8760h, got \"8761h\""},
        BadValue{"TrackerTtlInDays", "tracker: {idle_ttl: 7d}",
                 "1:21: tracker.idle_ttl: invalid duration \"7d\": unknown unit \"d\"; write a "
                 "whole number followed by one of the units ms, s, m, h (e.g. \"500ms\", "
                 "\"10s\", \"5m\", \"24h\")"},
        BadValue{"TrackerAsScalar", "tracker: 100000",
                 "1:10: tracker: expected a map with the keys max_entries, idle_ttl, got the "
                 "scalar \"100000\"; write it as \"key: value\" lines indented under tracker, or "
                 "as {key: value, ...}"},
        BadValue{"PoliciesDirEmpty", "policies_dir: ''",
                 "1:15: policies_dir: expected a directory path, got an empty string"},
        BadValue{"PoliciesDirList", "policies_dir: [a]",
                 "1:15: policies_dir: expected a directory path, got a list"}),
    [](const ::testing::TestParamInfo<BadValue>& info) { return info.param.name; });

TEST_F(ConfigErrors, LongValuesAreCutShortInMessages) {
  const std::string message = error_for("threads: " + std::string(500, '9') + "\n");
  EXPECT_EQ(message, "FILE:1:10: threads: expected an integer from 1 to 256, got \"" +
                         std::string(60, '9') + "...\" (500 characters)");
}

// --- the policies directory ---

TEST_F(ConfigErrors, PoliciesDirThatDoesNotExist) {
  EXPECT_EQ(error_for("threads: 2\npolicies_dir: ../rules\n"),
            "FILE:2:15: policies_dir: the directory " + (tree_.root() / "rules").string() +
                " does not exist (set to \"../rules\", relative to " +
                (tree_.root() / "conf").string() +
                "); create it, or set policies_dir to the directory that holds the policy files");
}

TEST_F(ConfigErrors, PoliciesDirThatIsAFile) {
  const fs::path file = tree_.write("not a directory", "rules.txt");
  EXPECT_EQ(error_for("policies_dir: " + file.string() + "\n"),
            "FILE:1:15: policies_dir: " + file.string() + " is not a directory (set to \"" +
                file.string() +
                "\"); create it, or set policies_dir to the directory that holds the policy "
                "files");
}

TEST_F(ConfigErrors, DefaultPoliciesDirThatDoesNotExist) {
  fs::remove(tree_.root() / "policies");
  EXPECT_EQ(error_for("threads: 2\n"),
            "FILE: policies_dir: the directory " + (tree_.root() / "policies").string() +
                " does not exist (the default \"../policies\", relative to " +
                (tree_.root() / "conf").string() +
                "); create it, or set policies_dir to the directory that holds the policy files");
}

TEST_F(ConfigErrors, OtherMistakesAreReportedBeforeAMissingPoliciesDir) {
  fs::remove(tree_.root() / "policies");
  EXPECT_TRUE(starts_with(error_for("threads: 0\n"), "FILE:1:10: threads: "));
}

// --- nothing from yaml-cpp escapes unconverted ---

TEST_F(ConfigErrors, OddInputsLoadOrFailWithConfigErrorOnly) {
  const std::string nested(10'000, '[');
  for (const std::string& text :
       {std::string("{"), std::string("]"), std::string("\t"), std::string("a: 'unterminated"),
        std::string("? [a, b]\n: c\n"), std::string("&anchor"), std::string("!!binary x: 1"),
        std::string("listen: !!int {port: 1}"), std::string("\x00\x01\xff", 3),
        std::string("<<: {threads: 2}"), std::string("'threads': \"2\"\n'listen': {'port': 0}"),
        std::string("listen: &l {port: 1}\nmetrics: *l\n"), nested}) {
    const fs::path file = tree_.write(text);
    try {
      load_config(file);
    } catch (const ConfigError& error) {
      EXPECT_TRUE(starts_with(error.what(), file.string())) << error.what();
    } catch (const std::exception& error) {
      ADD_FAILURE() << "input " << text.substr(0, 40) << " escaped as: " << error.what();
    }
  }
}

TEST_F(ConfigErrors, NestingTooDeepIsAConfigError) {
  const std::string message = error_for(std::string(10'000, '['));
  EXPECT_TRUE(starts_with(message, "FILE:1:")) << message;
  EXPECT_TRUE(contains(message, "invalid YAML: nested deeper than")) << message;
}

}  // namespace
}  // namespace nackguard::config
