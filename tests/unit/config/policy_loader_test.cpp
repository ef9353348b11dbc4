#include "proxy/config/policy_loader.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "config/config_test_support.hpp"

namespace nackguard::config {
namespace {

namespace fs = std::filesystem;
using retry::Backoff;
using retry::DeadLetter;
using retry::IdentitySource;
using retry::Policy;
using std::chrono::milliseconds;
using testing::TempTree;

const fs::path kSourceDir = NACKGUARD_SOURCE_DIR;
const fs::path kShippedPolicies = kSourceDir / "policies";

// The built-in default as loaded from `file`: what a file setting every key to its default
// must give.
Policy default_from(const fs::path& file) {
  Policy policy;
  policy.source = file.string();
  return policy;
}

class PolicyFiles : public testing::PolicyFileTest {};

// --- the shipped files ---

TEST(ShippedPolicies, DefaultYamlIsTheBuiltInDefault) {
  const retry::PolicySet set = load_policies(kShippedPolicies);
  ASSERT_EQ(set.policies().size(), 1u);
  EXPECT_EQ(set.policies()[0], default_from(kShippedPolicies / "default.yaml"));
  EXPECT_EQ(&set.fallback(), &set.policies()[0]);
  EXPECT_EQ(set.match("anything").source, (kShippedPolicies / "default.yaml").string());
}

TEST(ShippedPolicies, ExamplesLoadWithTheDocumentedValues) {
  const fs::path dir = kShippedPolicies / "examples";
  const retry::PolicySet set = load_policies(dir);
  ASSERT_EQ(set.policies().size(), 4u);

  const Policy& payments = set.match("payments");
  EXPECT_EQ(payments.source, (dir / "payments-strict.yaml").string());
  EXPECT_EQ(payments.max_redeliveries, 3u);
  EXPECT_EQ(payments.dead_letter.via, DeadLetter::Via::publish);
  EXPECT_EQ(payments.dead_letter.exchange, "payments.failed");
  EXPECT_EQ(payments.dead_letter.routing_key, "{queue}");

  const Policy& orders = set.match("orders.created");
  EXPECT_EQ(orders.source, (dir / "orders-delayed.yaml").string());
  EXPECT_EQ(orders.queue, "orders.*");
  EXPECT_EQ(orders.requeue, retry::RequeueMode::delayed);
  EXPECT_EQ(orders.max_redeliveries, 6u);
  EXPECT_EQ(orders.backoff.initial, milliseconds(1000));
  EXPECT_EQ(orders.backoff.max, milliseconds(300'000));
  EXPECT_EQ(orders.backoff.jitter, Backoff::Jitter::fraction);
  EXPECT_DOUBLE_EQ(orders.backoff.jitter_fraction, 0.2);

  const Policy& celery = set.match("celery");
  EXPECT_EQ(celery.source, (dir / "celery.yaml").string());
  const std::vector<IdentitySource> celery_identity{{IdentitySource::Kind::header, "id"},
                                                    {IdentitySource::Kind::correlation_id, ""},
                                                    {IdentitySource::Kind::body, ""}};
  EXPECT_EQ(celery.identity, celery_identity);

  const Policy& legacy = set.match("legacy.billing");
  EXPECT_EQ(legacy.source, (dir / "legacy-dlx.yaml").string());
  EXPECT_EQ(legacy.dead_letter.via, DeadLetter::Via::reject);

  EXPECT_EQ(set.match("unrelated").source, "built-in default");
}

TEST_F(PolicyFiles, ShippedDefaultAndExamplesLoadTogether) {
  // What an operator gets by copying every example up beside default.yaml.
  fs::copy_file(kShippedPolicies / "default.yaml", dir() / "default.yaml");
  for (const auto& entry : fs::directory_iterator(kShippedPolicies / "examples")) {
    fs::copy_file(entry.path(), dir() / entry.path().filename());
  }
  const retry::PolicySet set = load_policies(dir());
  EXPECT_EQ(set.policies().size(), 5u);
  EXPECT_EQ(set.match("payments").max_redeliveries, 3u);
  EXPECT_EQ(set.match("other").source, (dir() / "default.yaml").string());
}

// --- contents ---

TEST_F(PolicyFiles, UnsetKeysKeepTheirDefaults) {
  const fs::path file = write("invoices.yaml", "queue: invoices\nmax_redeliveries: 5\n");
  const retry::PolicySet set = load_policies(dir());
  ASSERT_EQ(set.policies().size(), 1u);
  Policy expected = default_from(file);
  expected.queue = "invoices";
  expected.max_redeliveries = 5;
  EXPECT_EQ(set.policies()[0], expected);
}

TEST_F(PolicyFiles, EmptySectionsKeepTheirDefaults) {
  const fs::path file = write("a.yaml", "queue: a\nbackoff:\nrate: {}\ndead_letter:\n");
  Policy expected = default_from(file);
  expected.queue = "a";
  EXPECT_EQ(load_policies(dir()).policies()[0], expected);
}

TEST_F(PolicyFiles, ReadsEveryKey) {
  const fs::path file = write("orders.yaml", R"(
queue: "orders.?"
max_redeliveries: 0
identity: [correlation_id, "header:x-request-id", body, message_id]
requeue: delayed
backoff: {initial: 250ms, multiplier: 1.5, max: 24h, jitter: none}
rate:
  window: 1m
  per_message: 1000000
  outage_ratio: 1
  min_messages: 1
  max_outage: 2h
dead_letter:
  via: publish
  exchange: dlx
  routing_key: "failed.{queue}.{queue}"
)");
  const Policy policy = load_policies(dir()).policies().at(0);
  EXPECT_EQ(policy.queue, "orders.?");
  EXPECT_EQ(policy.source, file.string());
  EXPECT_EQ(policy.max_redeliveries, 0u);
  const std::vector<IdentitySource> identity{{IdentitySource::Kind::correlation_id, ""},
                                             {IdentitySource::Kind::header, "x-request-id"},
                                             {IdentitySource::Kind::body, ""},
                                             {IdentitySource::Kind::message_id, ""}};
  EXPECT_EQ(policy.identity, identity);
  EXPECT_EQ(policy.requeue, retry::RequeueMode::delayed);
  EXPECT_EQ(policy.backoff.initial, milliseconds(250));
  EXPECT_DOUBLE_EQ(policy.backoff.multiplier, 1.5);
  EXPECT_EQ(policy.backoff.max, std::chrono::hours(24));
  EXPECT_EQ(policy.backoff.jitter, Backoff::Jitter::none);
  EXPECT_EQ(policy.rate.window, milliseconds(60'000));
  EXPECT_EQ(policy.rate.per_message, 1'000'000u);
  EXPECT_DOUBLE_EQ(policy.rate.outage_ratio, 1.0);
  EXPECT_EQ(policy.rate.min_messages, 1u);
  EXPECT_EQ(policy.rate.max_outage, std::chrono::hours(2));
  EXPECT_TRUE(policy.warnings.empty());
  EXPECT_EQ(policy.dead_letter.via, DeadLetter::Via::publish);
  EXPECT_EQ(policy.dead_letter.exchange, "dlx");
  EXPECT_EQ(policy.dead_letter.routing_key, "failed.{queue}.{queue}");
}

TEST_F(PolicyFiles, JitterForms) {
  const auto jitter_of = [&](std::string_view value) {
    write("j.yaml", "queue: j\nbackoff: {jitter: " + std::string(value) + "}\n");
    return load_policies(dir()).policies().at(0).backoff;
  };
  EXPECT_EQ(jitter_of("full").jitter, Backoff::Jitter::full);
  EXPECT_EQ(jitter_of("none").jitter, Backoff::Jitter::none);
  const Backoff fraction = jitter_of("0.25");
  EXPECT_EQ(fraction.jitter, Backoff::Jitter::fraction);
  EXPECT_DOUBLE_EQ(fraction.jitter_fraction, 0.25);
  EXPECT_DOUBLE_EQ(jitter_of("1").jitter_fraction, 1.0);
  EXPECT_DOUBLE_EQ(jitter_of(".5").jitter_fraction, 0.5);
}

TEST_F(PolicyFiles, BoundaryValuesAreAccepted) {
  write("b.yaml", R"(queue: b
max_redeliveries: 1000000
backoff: {initial: 1ms, max: 1ms, multiplier: 100}
rate: {window: 24h, outage_ratio: 0.001}
)");
  const Policy policy = load_policies(dir()).policies().at(0);
  EXPECT_EQ(policy.max_redeliveries, 1'000'000u);
  EXPECT_EQ(policy.backoff.initial, milliseconds(1));
  EXPECT_EQ(policy.backoff.max, milliseconds(1));
  EXPECT_DOUBLE_EQ(policy.backoff.multiplier, 100.0);
  EXPECT_EQ(policy.rate.window, std::chrono::hours(24));
  EXPECT_DOUBLE_EQ(policy.rate.outage_ratio, 0.001);
}

TEST_F(PolicyFiles, RejectNeedsNoExchange) {
  write("legacy.yaml", "queue: legacy\ndead_letter: {via: reject}\n");
  const DeadLetter dead_letter = load_policies(dir()).policies().at(0).dead_letter;
  EXPECT_EQ(dead_letter.via, DeadLetter::Via::reject);
  EXPECT_EQ(dead_letter, (DeadLetter{DeadLetter::Via::reject, "", "{queue}.dlq"}));
}

TEST_F(PolicyFiles, NamedExchangeMayTakeAnEmptyRoutingKey) {
  write("fanout.yaml", "queue: f\ndead_letter: {exchange: dead, routing_key: \"\"}\n");
  EXPECT_EQ(load_policies(dir()).policies().at(0).dead_letter.routing_key, "");
}

TEST(ParsePolicy, SourceIsTheFileAsNamed) {
  const Policy policy = parse_policy("queue: q\n", "policies/q.yaml");
  EXPECT_EQ(policy.queue, "q");
  EXPECT_EQ(policy.source, "policies/q.yaml");
}

// --- the directory ---

TEST_F(PolicyFiles, DirectoryWithoutPolicyFilesGivesTheBuiltInDefault) {
  write("README.md", "not a policy\n");
  const retry::PolicySet set = load_policies(dir());
  EXPECT_TRUE(set.policies().empty());
  EXPECT_EQ(set.match("orders"), retry::PolicySet().fallback());
  EXPECT_EQ(set.match("orders").source, "built-in default");
}

TEST_F(PolicyFiles, OnlyYamlFilesDirectlyInTheDirectoryAreLoaded) {
  write("a.yaml", "queue: a\n");
  write("b.yml", "queue: b\n");
  write("c.yaml.bak", "queue: [broken\n");
  write("d.json", "{]\n");
  write(".e.yaml", "queue: [broken\n");  // hidden: an editor's backup
  fs::create_directories(dir() / "examples");
  write("examples/f.yaml", "queue: [broken\n");
  fs::create_directories(dir() / "g.yaml");  // a directory, whatever its name
  const retry::PolicySet set = load_policies(dir());
  ASSERT_EQ(set.policies().size(), 2u);
  EXPECT_EQ(set.match("a").source, (dir() / "a.yaml").string());
  EXPECT_EQ(set.match("b").source, (dir() / "b.yml").string());
}

TEST_F(PolicyFiles, SymbolicLinksToFilesAreFollowed) {
  // As in a Kubernetes ConfigMap volume, where each file is a link into a hidden directory.
  fs::create_directories(dir() / "..data");
  write("..data/orders.yaml", "queue: orders\n");
  fs::create_symlink("..data/orders.yaml", dir() / "orders.yaml");
  const retry::PolicySet set = load_policies(dir());
  ASSERT_EQ(set.policies().size(), 1u);
  EXPECT_EQ(set.policies()[0].source, (dir() / "orders.yaml").string());
}

// --- precedence over loaded files ---

TEST_F(PolicyFiles, ExactBeatsGlobAndLongerPrefixWins) {
  write("1-all.yaml", "queue: \"*\"\nmax_redeliveries: 1\n");
  write("2-orders.yaml", "queue: \"orders.*\"\nmax_redeliveries: 2\n");
  write("3-orders-eu.yaml", "queue: \"orders.eu.*\"\nmax_redeliveries: 3\n");
  write("4-paid.yaml", "queue: orders.eu.paid\nmax_redeliveries: 4\n");
  write("5-any-paid.yaml", "queue: \"*.paid\"\nmax_redeliveries: 5\n");
  write("6-orders-q.yaml", "queue: \"orders.??.x\"\nmax_redeliveries: 6\n");
  const retry::PolicySet set = load_policies(dir());
  EXPECT_EQ(set.match("orders.eu.paid").max_redeliveries, 4u);  // exact
  EXPECT_EQ(set.match("orders.eu.new").max_redeliveries, 3u);   // prefix "orders.eu."
  EXPECT_EQ(set.match("orders.us.paid").max_redeliveries, 2u);  // "orders." beats "" of *.paid
  EXPECT_EQ(set.match("orders.us.x").max_redeliveries, 6u);     // same prefix, more literals
  EXPECT_EQ(set.match("billing.paid").max_redeliveries, 5u);    // "*.paid" beats "*"
  EXPECT_EQ(set.match("billing").max_redeliveries, 1u);         // only "*"
  EXPECT_EQ(set.match("billing").source, (dir() / "1-all.yaml").string());
  EXPECT_EQ(set.fallback().source, (dir() / "1-all.yaml").string());
}

// --- describe_policies ---

TEST_F(PolicyFiles, DescribeHeadsEachPolicyWithItsFile) {
  const fs::path orders = write("orders.yaml", "queue: orders\nmax_redeliveries: 5\n");
  const std::string text = describe_policies(load_policies(dir()));

  // Each policy's lines, indented, without the "source:" line that would repeat the heading.
  std::string expected = orders.string() + ":\n";
  std::istringstream lines(retry::describe(load_policies(dir()).policies().at(0)));
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with("source: ")) expected += "  " + line + "\n";
  }
  expected += "built-in default:\n";
  std::istringstream builtin(retry::describe(retry::PolicySet().fallback()));
  for (std::string line; std::getline(builtin, line);) {
    if (!line.starts_with("source: ")) expected += "  " + line + "\n";
  }
  EXPECT_EQ(text, expected);
  EXPECT_TRUE(testing::contains(text, "\n  max_redeliveries: 5\n")) << text;
  EXPECT_FALSE(testing::contains(text, "source:")) << text;
}

TEST_F(PolicyFiles, DescribeListsTheDefaultFileOnce) {
  write("default.yaml", "queue: \"*\"\n");
  write("a.yaml", "queue: a\n");
  const std::string text = describe_policies(load_policies(dir()));
  EXPECT_TRUE(testing::starts_with(text, (dir() / "a.yaml").string() + ":\n")) << text;
  EXPECT_TRUE(testing::contains(text, "\n" + (dir() / "default.yaml").string() + ":\n")) << text;
  EXPECT_FALSE(testing::contains(text, "built-in default")) << text;
}

// rate.min_deliveries was renamed rate.min_messages: the old name still loads, with a warning
// that names the file, the line and the key, which --check-config prints and nackguard logs.
TEST_F(PolicyFiles, OldMinDeliveriesKeyLoadsWithAWarning) {
  const fs::path file = write("q.yaml", "queue: q\nrate:\n  window: 10s\n  min_deliveries: 7\n");
  const retry::PolicySet policies = load_policies(dir());
  const Policy& policy = policies.policies().at(0);
  EXPECT_EQ(policy.rate.min_messages, 7u);
  const std::string expected = file.string() +
                               ":4:3: rate.min_deliveries: renamed rate.min_messages (outage "
                               "detection counts distinct messages, not deliveries); the old "
                               "name still works, rename the key";
  EXPECT_EQ(policy.warnings, std::vector<std::string>{expected});
  EXPECT_EQ(policy_warnings(policies), std::vector<std::string>{"warning: " + expected});
  // The effective policy names the new key only.
  const std::string text = describe_policies(policies);
  EXPECT_TRUE(testing::contains(text, "\n  rate.min_messages: 7\n")) << text;
  EXPECT_FALSE(testing::contains(text, "min_deliveries")) << text;
}

TEST_F(PolicyFiles, OldAndNewMinimumKeysTogetherAreAnError) {
  const fs::path file = write("q.yaml", "queue: q\nrate: {min_messages: 5, min_deliveries: 7}\n");
  try {
    load_policies(dir());
    ADD_FAILURE() << "loaded";
  } catch (const ConfigError& error) {
    EXPECT_EQ(std::string(error.what()),
              file.string() +
                  ":2:41: rate.min_deliveries: is the old name of rate.min_messages, which is "
                  "set too; remove it");
  }
}

TEST_F(PolicyFiles, MaxOutageIsADuration) {
  write("q.yaml", "queue: q\nrate: {max_outage: 45m}\n");
  EXPECT_EQ(load_policies(dir()).policies().at(0).rate.max_outage, std::chrono::minutes(45));
  write("q.yaml", "queue: q\n");
  EXPECT_EQ(load_policies(dir()).policies().at(0).rate.max_outage, std::chrono::minutes(30));
  write("q.yaml", "queue: q\nrate: {max_outage: 0s}\n");
  EXPECT_THROW(load_policies(dir()), ConfigError);
}

TEST_F(PolicyFiles, AckTimeoutIsADurationOrOff) {
  write("q.yaml", "queue: q\nack_timeout: 10m\n");
  EXPECT_EQ(load_policies(dir()).policies().at(0).ack_timeout, std::chrono::minutes(10));
  write("q.yaml", "queue: q\nack_timeout: off\n");
  EXPECT_EQ(load_policies(dir()).policies().at(0).ack_timeout.count(), 0);
  write("q.yaml", "queue: q\n");
  EXPECT_EQ(load_policies(dir()).policies().at(0).ack_timeout.count(), 0);
  write("q.yaml", "queue: q\nack_timeout: 500ms\n");  // below the once-a-second check
  EXPECT_THROW(load_policies(dir()), ConfigError);
}

TEST(DescribePolicies, BuiltInDefaultAlone) {
  const std::string text = describe_policies(retry::PolicySet());
  EXPECT_TRUE(testing::starts_with(text, "built-in default:\n  ")) << text;
  EXPECT_TRUE(testing::contains(text, "\n  queue: *\n")) << text;
}

}  // namespace
}  // namespace nackguard::config
