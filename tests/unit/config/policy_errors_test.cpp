// Every way a policy file can be wrong, each asserting that the message names the file, the
// 1-based line and column, the full dotted key, and what to write instead.

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "config/config_test_support.hpp"
#include "proxy/config/policy_loader.hpp"

namespace nackguard::config {
namespace {

namespace fs = std::filesystem;
using namespace testing;  // config_error_of, contains, starts_with, TempTree

class PolicyErrors : public testing::PolicyFileTest {};

// --- the directory and the files ---

TEST_F(PolicyErrors, MissingDirectoryNamesThePath) {
  const fs::path missing = tree_.root() / "nowhere";
  EXPECT_EQ(config_error_of([&] { load_policies(missing); }),
            missing.string() +
                ": cannot read the policies directory: it does not exist; create it, or set "
                "policies_dir in the config file to the directory that holds the policy files");
}

TEST_F(PolicyErrors, FileInsteadOfDirectory) {
  write("p.yaml", "queue: p\n");
  const fs::path file = dir() / "p.yaml";
  EXPECT_EQ(config_error_of([&] { load_policies(file); }),
            file.string() +
                ": cannot read the policies directory: it is not a directory; create it, or set "
                "policies_dir in the config file to the directory that holds the policy files");
}

TEST_F(PolicyErrors, BrokenSymbolicLink) {
  fs::create_symlink("gone.yaml", dir() / "orders.yaml");
  EXPECT_EQ(load_error(),
            "orders.yaml: cannot read the policy file: it is a symbolic link to a file that "
            "does not exist; fix the link, or remove it");
}

TEST_F(PolicyErrors, EmptyFile) {
  const std::string expected =
      "p.yaml: the policy file is empty; write at least \"queue: <name>\", or remove the file";
  EXPECT_EQ(error_for(""), expected);
  EXPECT_EQ(error_for("# only a comment\n"), expected);
  EXPECT_EQ(error_for("---\n"), expected);
  EXPECT_EQ(error_for("~\n"), expected);
}

TEST_F(PolicyErrors, MissingQueue) {
  EXPECT_EQ(error_for("max_redeliveries: 3\n"),
            "p.yaml:1:1: queue: missing; every policy file names the queue it applies to: add "
            "\"queue: <name>\" (an exact name, a glob with * and ? in quotes such as "
            "\"orders.*\", or \"*\" for the default policy)");
  EXPECT_TRUE(starts_with(error_for("{}\n"), "p.yaml:1:1: queue: missing;"));
}

TEST_F(PolicyErrors, ErrorsNameTheFileThatHasThem) {
  write("a.yaml", "queue: a\n");
  write("b.yaml", "queue: b\nmax_redeliveries: many\n");
  write("c.yaml", "queue: c\n");
  EXPECT_EQ(load_error(),
            "b.yaml:2:19: max_redeliveries: expected an integer from 0 to 1000000, got "
            "\"many\"");
}

// --- two files for one queue ---

TEST_F(PolicyErrors, SameQueueInTwoFilesNamesBoth) {
  write("orders.yaml", "queue: orders\n");
  write("orders-new.yaml", "# a newer copy\nmax_redeliveries: 3\nqueue: orders\n");
  // Files are read in name order, so orders-new.yaml comes first and orders.yaml repeats it.
  EXPECT_EQ(load_error(),
            "orders.yaml:1:8: queue: \"orders\" already has a policy, in orders-new.yaml:3:8; a "
            "queue (or glob) takes one policy file: merge the two files, or change the queue in "
            "one of them");
}

TEST_F(PolicyErrors, SameGlobInTwoFilesNamesBoth) {
  write("default.yaml", "queue: \"*\"\n");
  write("zz-all.yml", "queue: '*'\n");
  EXPECT_EQ(load_error(),
            "zz-all.yml:1:8: queue: \"*\" already has a policy, in default.yaml:1:8; a queue (or "
            "glob) takes one policy file: merge the two files, or change the queue in one of "
            "them");
}

// --- YAML and shape ---

TEST_F(PolicyErrors, UnquotedStarIsExplained) {
  const std::string message = error_for("queue: *\n");
  EXPECT_TRUE(starts_with(message, "p.yaml:1:9: invalid YAML: ")) << message;
  EXPECT_TRUE(contains(message, "quote a value that starts with * or {")) << message;
  EXPECT_TRUE(starts_with(error_for("queue: *.dlq\n"), "p.yaml:1:8: invalid YAML: "));
}

TEST_F(PolicyErrors, UnquotedBraceIsExplained) {
  const std::string message = error_for("queue: q\ndead_letter:\n  routing_key: {queue}.dlq\n");
  EXPECT_TRUE(starts_with(message, "p.yaml:3:")) << message;
  EXPECT_TRUE(contains(message, "routing_key: \"{queue}.dlq\"")) << message;
  EXPECT_EQ(error_for("queue: q\ndead_letter: {routing_key: {queue}}\n"),
            "p.yaml:2:28: dead_letter.routing_key: expected a routing key in quotes, such as "
            "\"{queue}.dlq\", got a map");
}

TEST_F(PolicyErrors, SecondDocumentIsRefused) {
  EXPECT_EQ(error_for("queue: a\n---\nqueue: b\n"),
            "p.yaml:3:1: the file holds more than one YAML document (\"---\" starts another); "
            "put each policy in a file of its own");
}

TEST_F(PolicyErrors, TopLevelMustBeAMap) {
  EXPECT_EQ(
      error_for("- queue: a\n"),
      "p.yaml:1:1: expected a map of settings (queue, max_redeliveries, identity, requeue, "
      "backoff, rate, dead_letter, broker_delivery_limit, queue_type, ack_timeout) at the top "
      "level of "
      "the file, got a list");
}

TEST_F(PolicyErrors, SectionGivenAScalar) {
  EXPECT_EQ(error_for("queue: q\nbackoff: 1s\n"),
            "p.yaml:2:10: backoff: expected a map with the keys initial, multiplier, max, "
            "jitter, got the scalar \"1s\"; write it as \"key: value\" lines indented under "
            "backoff, or as {key: value, ...}");
}

// --- unknown and repeated keys ---

TEST_F(PolicyErrors, UnknownKeys) {
  EXPECT_EQ(error_for("queue: q\nmax_redelivery: 3\n"),
            "p.yaml:2:1: unknown key \"max_redelivery\" (did you mean \"max_redeliveries\"?); "
            "valid keys here: queue, max_redeliveries, identity, requeue, backoff, rate, "
            "dead_letter, broker_delivery_limit, queue_type, ack_timeout");
  EXPECT_EQ(error_for("queu: q\n"),
            "p.yaml:1:1: unknown key \"queu\" (did you mean \"queue\"?); valid keys here: queue, "
            "max_redeliveries, identity, requeue, backoff, rate, dead_letter, "
            "broker_delivery_limit, queue_type, ack_timeout");
  EXPECT_EQ(error_for("queue: q\nbackoff:\n  inital: 1s\n"),
            "p.yaml:3:3: unknown key \"backoff.inital\" (did you mean \"initial\"?); valid keys "
            "here: initial, multiplier, max, jitter");
  EXPECT_EQ(error_for("queue: q\nrate: {windows: 10s}\n"),
            "p.yaml:2:8: unknown key \"rate.windows\" (did you mean \"window\"?); valid keys "
            "here: window, per_message, outage_ratio, min_messages, max_outage, min_deliveries");
  EXPECT_EQ(error_for("queue: q\ndead_letter:\n  routingkey: x\n"),
            "p.yaml:3:3: unknown key \"dead_letter.routingkey\" (did you mean \"routing_key\"?); "
            "valid keys here: via, exchange, routing_key");
  EXPECT_EQ(error_for("queue: q\ndelay: 5s\n"),
            "p.yaml:2:1: unknown key \"delay\"; valid keys here: queue, max_redeliveries, "
            "identity, requeue, backoff, rate, dead_letter, broker_delivery_limit, queue_type, "
            "ack_timeout");
}

TEST_F(PolicyErrors, DuplicateKey) {
  EXPECT_EQ(error_for("queue: a\nmax_redeliveries: 1\nqueue: b\n"),
            "p.yaml:3:1: duplicate key \"queue\" (first set at line 1); keep only one of them");
}

// --- cross-field checks ---

TEST_F(PolicyErrors, InitialLongerThanMax) {
  EXPECT_EQ(error_for("queue: q\nbackoff:\n  initial: 2m\n  max: 1m\n"),
            "p.yaml:3:12: backoff.initial: the first delay (2m) is longer than backoff.max (1m); "
            "lower backoff.initial or raise backoff.max");
  EXPECT_EQ(error_for("queue: q\nbackoff: {initial: 1h}\n"),
            "p.yaml:2:20: backoff.initial: the first delay (1h) is longer than backoff.max (10m, "
            "the default); lower backoff.initial or raise backoff.max");
  EXPECT_EQ(error_for("queue: q\nbackoff: {max: 500ms}\n"),
            "p.yaml:2:16: backoff.max: the first delay (1s) is longer than backoff.max (500ms); "
            "lower backoff.initial or raise backoff.max");
}

TEST_F(PolicyErrors, RejectTakesNoExchangeOrRoutingKey) {
  EXPECT_EQ(error_for("queue: q\ndead_letter:\n  via: reject\n  exchange: dlx\n"),
            "p.yaml:4:13: dead_letter.exchange: has no effect with via: reject (the broker "
            "dead-letters through the queue's own x-dead-letter-exchange); remove it, or set "
            "via: publish");
  EXPECT_EQ(error_for("queue: q\ndead_letter: {routing_key: x, via: reject}\n"),
            "p.yaml:2:28: dead_letter.routing_key: has no effect with via: reject (the broker "
            "dead-letters through the queue's own x-dead-letter-exchange); remove it, or set "
            "via: publish");
}

TEST_F(PolicyErrors, DefaultExchangeNeedsARoutingKey) {
  EXPECT_EQ(error_for("queue: q\ndead_letter: {routing_key: \"\"}\n"),
            "p.yaml:2:28: dead_letter.routing_key: is empty, but the default exchange (exchange: "
            "\"\") routes by routing key to the queue of that name; give the dead-letter "
            "queue's name, such as \"{queue}.dlq\"");
}

// --- values ---

struct BadValue {
  const char* name;
  const char* yaml;     // after "queue: q\n"
  const char* message;  // after "p.yaml:"
};

class BadPolicyValues : public PolicyErrors, public ::testing::WithParamInterface<BadValue> {};

TEST_P(BadPolicyValues, AreRefusedWithPositionKeyAndWhatToWrite) {
  EXPECT_EQ(error_for(std::string("queue: q\n") + GetParam().yaml),
            std::string("p.yaml:") + GetParam().message);
}

INSTANTIATE_TEST_SUITE_P(
    Table, BadPolicyValues,
    ::testing::Values(
        BadValue{"MaxRedeliveriesNegative", "max_redeliveries: -1",
                 "2:19: max_redeliveries: expected an integer from 0 to 1000000, got \"-1\""},
        BadValue{"MaxRedeliveriesTooLarge", "max_redeliveries: 1000001",
                 "2:19: max_redeliveries: expected an integer from 0 to 1000000, got "
                 "\"1000001\""},
        BadValue{"MaxRedeliveriesEmpty", "max_redeliveries:",
                 "2:1: max_redeliveries: expected an integer from 0 to 1000000, got nothing"},
        BadValue{"IdentityScalar", "identity: message_id",
                 "2:11: identity: expected a list such as [message_id, header:id, "
                 "correlation_id, body], got the scalar \"message_id\""},
        BadValue{"IdentityEmpty", "identity: []",
                 "2:11: identity: the list is empty; name at least one source, such as "
                 "[message_id, body]"},
        BadValue{"IdentityUnknown", "identity: [message_id, msgid]",
                 "2:24: identity: expected one of message_id, correlation_id, body, "
                 "header:<name>, got \"msgid\""},
        BadValue{"IdentityNearMiss", "identity:\n  - message_id\n  - correlationid",
                 "4:5: identity: expected one of message_id, correlation_id, body, "
                 "header:<name>, got \"correlationid\" (did you mean \"correlation_id\"?)"},
        BadValue{"IdentityHeadersTypo", "identity: [headers:id]",
                 "2:12: identity: expected one of message_id, correlation_id, body, "
                 "header:<name>, got \"headers:id\" (did you mean \"header:id\"?)"},
        BadValue{"IdentityHeaderWithSpace", "identity: [header: id]",
                 "2:12: identity: expected one of message_id, correlation_id, body, "
                 "header:<name>, got a map; write header:<name> as one word, without a space "
                 "after the colon (YAML reads \"header: id\" as a map)"},
        BadValue{"IdentityQuotedHeaderWithSpace", "identity: [\"header: id\"]",
                 "2:12: identity: remove the space after header: (the name starts right after "
                 "the colon, e.g. header:id)"},
        BadValue{"IdentityHeaderWithoutName", "identity: [body, \"header:\"]",
                 "2:18: identity: header: needs the header's name after the colon, e.g. "
                 "header:id"},
        BadValue{"IdentityTwice", "identity: [body, message_id, body]",
                 "2:30: identity: \"body\" is listed twice; list each source once"},
        BadValue{"IdentityNested", "identity: [[body]]",
                 "2:12: identity: expected one of message_id, correlation_id, body, "
                 "header:<name>, got a list"},
        BadValue{"RequeueUnknown", "requeue: later",
                 "2:10: requeue: expected one of immediate, delayed, got \"later\""},
        BadValue{"RequeueNearMiss", "requeue: delay",
                 "2:10: requeue: expected one of immediate, delayed, got \"delay\" (did you "
                 "mean \"delayed\"?)"},
        BadValue{"InitialWithoutUnit", "backoff: {initial: 5}",
                 "2:20: backoff.initial: invalid duration \"5\": the unit is missing; write a "
                 "whole number followed by one of the units ms, s, m, h (e.g. \"500ms\", "
                 "\"10s\", \"5m\", \"24h\")"},
        BadValue{"InitialZero", "backoff: {initial: 0s}",
                 "2:20: backoff.initial: expected a duration from 1ms to 24h, got \"0s\""},
        BadValue{"MaxTooLong", "backoff: {max: 25h}",
                 "2:16: backoff.max: expected a duration from 1ms to 24h, got \"25h\""},
        BadValue{"MultiplierBelowOne", "backoff: {multiplier: 0.5}",
                 "2:23: backoff.multiplier: expected a number from 1 to 100, such as 2 or 1.5, "
                 "got \"0.5\""},
        BadValue{"MultiplierTooLarge", "backoff: {multiplier: 101}",
                 "2:23: backoff.multiplier: expected a number from 1 to 100, such as 2 or 1.5, "
                 "got \"101\""},
        BadValue{"MultiplierWord", "backoff: {multiplier: double}",
                 "2:23: backoff.multiplier: expected a number from 1 to 100, such as 2 or 1.5, "
                 "got \"double\""},
        BadValue{"MultiplierExponent", "backoff: {multiplier: 1e1}",
                 "2:23: backoff.multiplier: expected a number from 1 to 100, such as 2 or 1.5, "
                 "got \"1e1\""},
        BadValue{"MultiplierNan", "backoff: {multiplier: nan}",
                 "2:23: backoff.multiplier: expected a number from 1 to 100, such as 2 or 1.5, "
                 "got \"nan\""},
        BadValue{"JitterUnknown", "backoff: {jitter: random}",
                 "2:19: backoff.jitter: expected none, full, or a fraction above 0 and at most 1 "
                 "such as 0.2, got \"random\""},
        BadValue{"JitterNearMiss", "backoff: {jitter: ful}",
                 "2:19: backoff.jitter: expected none, full, or a fraction above 0 and at most 1 "
                 "such as 0.2, got \"ful\" (did you mean \"full\"?)"},
        BadValue{"JitterZero", "backoff: {jitter: 0}",
                 "2:19: backoff.jitter: expected none, full, or a fraction above 0 and at most 1 "
                 "such as 0.2, got \"0\"; for no jitter write none"},
        BadValue{"JitterAboveOne", "backoff: {jitter: 1.5}",
                 "2:19: backoff.jitter: expected none, full, or a fraction above 0 and at most 1 "
                 "such as 0.2, got \"1.5\""},
        BadValue{"JitterPercent", "backoff: {jitter: 20%}",
                 "2:19: backoff.jitter: expected none, full, or a fraction above 0 and at most 1 "
                 "such as 0.2, got \"20%\"; write a percentage as a fraction (20% is 0.2)"},
        BadValue{"JitterNegative", "backoff: {jitter: -0.2}",
                 "2:19: backoff.jitter: expected none, full, or a fraction above 0 and at most 1 "
                 "such as 0.2, got \"-0.2\""},
        BadValue{"WindowTooShort", "rate: {window: 500ms}",
                 "2:16: rate.window: expected a duration from 1s to 24h, got \"500ms\""},
        BadValue{"PerMessageZero", "rate:\n  per_message: 0",
                 "3:16: rate.per_message: expected a number of returns from 1 to 1000000, got "
                 "\"0\""},
        BadValue{"OutageRatioZero", "rate: {outage_ratio: 0}",
                 "2:22: rate.outage_ratio: expected a fraction above 0 and at most 1, such as "
                 "0.5, got \"0\""},
        BadValue{"OutageRatioAboveOne", "rate: {outage_ratio: 1.01}",
                 "2:22: rate.outage_ratio: expected a fraction above 0 and at most 1, such as "
                 "0.5, got \"1.01\""},
        BadValue{"OutageRatioPercent", "rate: {outage_ratio: 50%}",
                 "2:22: rate.outage_ratio: expected a fraction above 0 and at most 1, such as "
                 "0.5, got \"50%\"; write a percentage as a fraction (50% is 0.5)"},
        BadValue{"MinDeliveriesZero", "rate: {min_deliveries: 0}",
                 "2:24: rate.min_deliveries: expected an integer from 1 to 1000000, got \"0\""},
        BadValue{"ViaUnknown", "dead_letter: {via: drop}",
                 "2:20: dead_letter.via: expected one of publish, reject, got \"drop\""},
        BadValue{"ViaNearMiss", "dead_letter: {via: rejected}",
                 "2:20: dead_letter.via: expected one of publish, reject, got \"rejected\" (did "
                 "you mean \"reject\"?)"},
        BadValue{"ExchangeNothing", "dead_letter:\n  exchange:\n  via: publish",
                 "3:3: dead_letter.exchange: expected an exchange name in quotes (\"\" for the "
                 "default exchange), got nothing"},
        BadValue{"RoutingKeyUnknownPlaceholder", "dead_letter: {routing_key: \"{queu}.dlq\"}",
                 "2:28: dead_letter.routing_key: unknown placeholder in \"{queu}.dlq\" at "
                 "character 1; the only placeholder is {queue} (the queue's name)"},
        BadValue{"RoutingKeyStrayBrace", "dead_letter: {routing_key: \"{queue}.dlq}\"}",
                 "2:28: dead_letter.routing_key: unknown placeholder in \"{queue}.dlq}\" at "
                 "character 12; the only placeholder is {queue} (the queue's name)"}),
    [](const ::testing::TestParamInfo<BadValue>& info) { return info.param.name; });

TEST_F(PolicyErrors, QueueValues) {
  EXPECT_EQ(error_for("queue: ''\n"),
            "p.yaml:1:8: queue: expected a queue name, got an empty string; write \"*\" for the "
            "default policy");
  EXPECT_EQ(error_for("queue:\n"),
            "p.yaml:1:1: queue: expected a queue name, or a glob such as \"orders.*\", got "
            "nothing");
  EXPECT_EQ(error_for("queue: [a, b]\n"),
            "p.yaml:1:8: queue: expected a queue name, or a glob such as \"orders.*\", got a "
            "list");
  EXPECT_EQ(error_for("queue: " + std::string(256, 'q') + "\n"),
            "p.yaml:1:8: queue: is 256 bytes long; AMQP queue names are at most 255 bytes");
}

TEST_F(PolicyErrors, LongNames) {
  const std::string name(256, 'x');
  EXPECT_EQ(error_for("queue: q\ndead_letter: {exchange: " + name + "}\n"),
            "p.yaml:2:25: dead_letter.exchange: is 256 bytes long; AMQP exchange names are at "
            "most 255 bytes");
  EXPECT_EQ(error_for("queue: q\nidentity: [\"header:" + name + "\"]\n"),
            "p.yaml:2:12: identity: is 256 bytes long; AMQP header names are at most 255 bytes");
}

// --- nothing from yaml-cpp escapes unconverted ---

TEST_F(PolicyErrors, OddInputsLoadOrFailWithConfigErrorOnly) {
  const std::string nested(10'000, '[');
  for (const std::string& text :
       {std::string("{"), std::string("]"), std::string("\t"), std::string("queue: 'open"),
        std::string("? [a, b]\n: c\n"), std::string("&anchor"), std::string("!!binary x: 1"),
        std::string("queue: !!int {a: 1}"), std::string("\x00\x01\xff", 3),
        std::string("<<: {queue: a}"), std::string("queue: &q a\nidentity: [*q]\n"),
        std::string("queue: q\nidentity: [~]\n"), std::string("queue: q\nidentity: [{a: b}]\n"),
        std::string("queue: q\nidentity: [{? [x] : y}]\n"), nested}) {
    write("p.yaml", text);
    try {
      load_policies(dir());
    } catch (const ConfigError& error) {
      EXPECT_TRUE(starts_with(error.what(), (dir() / "p.yaml").string())) << error.what();
    } catch (const std::exception& error) {
      ADD_FAILURE() << "input " << text.substr(0, 40) << " escaped as: " << error.what();
    }
  }
}

}  // namespace
}  // namespace nackguard::config
