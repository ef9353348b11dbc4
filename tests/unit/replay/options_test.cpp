// The command line of `nackguard replay`: what it accepts, and each mistake as a named case.
#include "proxy/replay/options.hpp"

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <vector>

#include "proxy/replay/errors.hpp"

namespace nackguard::replay {
namespace {

const char* const kUrl = "amqp://u:p@rabbit:5673/prod";
const char* const kTlsUrl = "amqps://u:p@rabbit/prod";

ParsedArgs parse(std::initializer_list<std::string> args,
                 const std::optional<std::string>& env = std::nullopt) {
  std::vector<std::string> storage{"replay"};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<const char*> argv;
  for (const auto& arg : storage) argv.push_back(arg.c_str());
  return parse_args(static_cast<int>(argv.size()), argv.data(), env);
}

TEST(ParseArgs, MinimalCommandLineTakesTheDefaults) {
  Options o = parse({"--upstream", kUrl, "--from", "orders.dlq", "--to", "orders"}).options;
  EXPECT_EQ(o.upstream, (Upstream{"rabbit", 5673, "u", "p", "prod"}));
  EXPECT_EQ(o.from, "orders.dlq");
  EXPECT_EQ(o.to, "orders");
  EXPECT_EQ(o.limit, std::nullopt);
  EXPECT_EQ(o.rate, std::nullopt);
  EXPECT_EQ(o.max_replays, 3);
  EXPECT_FALSE(o.dry_run);
  EXPECT_EQ(o.group_by, (std::vector<TriageKey>{*parse_key("reason")}));
  EXPECT_TRUE(o.where.empty());
  EXPECT_FALSE(o.since || o.until || o.json);
}

TEST(ParseArgs, TlsOptionsWithAnAmqpsUrl) {
  Options o = parse({"--upstream", "amqps://rabbit/prod?auth_mechanism=external", "--from", "q.dlq",
                     "--to", "q", "--ca-file", "ca.pem", "--cert-file", "c.pem", "--key-file",
                     "c.key", "--server-name", "rabbit.internal"})
                  .options;
  EXPECT_TRUE(o.tls.enabled);
  EXPECT_TRUE(o.tls.verify);
  EXPECT_EQ(o.tls.ca_file, "ca.pem");
  EXPECT_EQ(o.tls.cert_file, "c.pem");
  EXPECT_EQ(o.tls.key_file, "c.key");
  EXPECT_EQ(o.tls.server_name, "rabbit.internal");
  EXPECT_TRUE(o.upstream.external);
  EXPECT_EQ(o.upstream.port, 5671);
  Options plain =
      parse({"--upstream", kTlsUrl, "--from", "q.dlq", "--to", "q", "--no-verify"}).options;
  EXPECT_TRUE(plain.tls.enabled);
  EXPECT_FALSE(plain.tls.verify);
  EXPECT_FALSE(parse({"--upstream", kUrl, "--from", "q.dlq", "--to", "q"}).options.tls.enabled);
}

TEST(ParseArgs, TriageOptions) {
  Options o = parse({"--upstream", kUrl, "--from", "q.dlq", "--to", "q", "--group-by",
                     "header:source_id,reason,day", "--where", "header:source_id=A", "--where",
                     "reason=crash_loop", "--since", "7d", "--until", "30m", "--format", "json"})
                  .options;
  EXPECT_EQ(o.group_by, (std::vector<TriageKey>{*parse_key("header:source_id"),
                                                *parse_key("reason"), *parse_key("day")}));
  ASSERT_EQ(o.where.size(), 2u);
  EXPECT_EQ(o.where[1].key.name(), "reason");
  EXPECT_EQ(o.where[1].value, "crash_loop");
  EXPECT_EQ(o.since, std::chrono::seconds(7 * 86400));
  EXPECT_EQ(o.until, std::chrono::seconds(1800));
  EXPECT_TRUE(o.json);
}

TEST(ParseArgs, EveryOption) {
  Options o = parse({"--upstream=" + std::string(kUrl), "--from=q.dlq", "--to=q", "--limit", "7",
                     "--rate", "2.5", "--max-replays", "5", "--dry-run"})
                  .options;
  EXPECT_EQ(o.limit, 7u);
  EXPECT_EQ(o.rate, 2.5);
  EXPECT_EQ(o.max_replays, 5);
  EXPECT_TRUE(o.dry_run);
}

TEST(ParseArgs, HelpNeedsNothingElse) {
  ParsedArgs parsed = parse({"--help"});
  EXPECT_TRUE(parsed.help);
  EXPECT_NE(parsed.usage.find("--max-replays"), std::string::npos);
  EXPECT_NE(parsed.usage.find("NACKGUARD_REPLAY_UPSTREAM"), std::string::npos);
  EXPECT_TRUE(parse({"-h"}).help);
}

TEST(ParseArgs, UpstreamFromTheEnvironment) {
  Options o = parse({"--from", "q.dlq", "--to", "q"}, "amqp://e:pw@h:1/%2F").options;
  EXPECT_EQ(o.upstream, (Upstream{"h", 1, "e", "pw", "/"}));
  o = parse({"--upstream", "amqp://h:1/v", "--from", "q.dlq", "--to", "q"}, "e:pw").options;
  EXPECT_EQ(o.upstream, (Upstream{"h", 1, "e", "pw", "v"}));
}

TEST(ParseArgs, ABadUrlIsAFailureNotAUsageError) {
  EXPECT_THROW(parse({"--upstream", "amqp://h:0", "--from", "a", "--to", "b"}), Failure);
  try {
    parse({"--upstream", "amqp://h:0", "--from", "a", "--to", "b"});
  } catch (const UsageError&) {
    ADD_FAILURE() << "a bad URL must exit 1, not 2";
  } catch (const Failure&) {
  }
}

struct BadArgs {
  const char* name;
  std::vector<std::string> args;
  const char* message_part;
};

void PrintTo(const BadArgs& c, std::ostream* os) {
  *os << c.name;
}

class BadArgsTest : public testing::TestWithParam<BadArgs> {};

TEST_P(BadArgsTest, IsAUsageErrorSayingWhatIsWrong) {
  const BadArgs& c = GetParam();
  std::vector<std::string> storage{"replay"};
  storage.insert(storage.end(), c.args.begin(), c.args.end());
  std::vector<const char*> argv;
  for (const auto& arg : storage) argv.push_back(arg.c_str());
  try {
    parse_args(static_cast<int>(argv.size()), argv.data(), std::nullopt);
    FAIL() << "accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(c.message_part), std::string::npos) << e.what();
  }
}

std::vector<std::string> with(std::initializer_list<std::string> extra) {
  std::vector<std::string> args{"--upstream", kUrl, "--from", "q.dlq", "--to", "q"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

INSTANTIATE_TEST_SUITE_P(
    Args, BadArgsTest,
    testing::Values(
        BadArgs{"missing_from", {"--upstream", kUrl, "--to", "q"}, "--from QUEUE is required"},
        BadArgs{"missing_to", {"--upstream", kUrl, "--from", "q.dlq"}, "--to QUEUE is required"},
        BadArgs{"empty_from", {"--upstream", kUrl, "--from", "", "--to", "q"}, "--from"},
        BadArgs{"same_queue", {"--upstream", kUrl, "--from", "q", "--to", "q"}, "same queue"},
        BadArgs{"long_queue",
                {"--upstream", kUrl, "--from", std::string(256, 'q'), "--to", "q"},
                "255"},
        BadArgs{"no_upstream", {"--from", "q.dlq", "--to", "q"}, "no broker given"},
        BadArgs{"limit_zero", with({"--limit", "0"}), "--limit"},
        BadArgs{"limit_negative", with({"--limit", "-1"}), "--limit"},
        BadArgs{"limit_not_a_number", with({"--limit", "ten"}), "--limit"},
        BadArgs{"limit_trailing", with({"--limit", "10x"}), "--limit"},
        BadArgs{"limit_fraction", with({"--limit", "1.5"}), "--limit"},
        BadArgs{"rate_zero", with({"--rate", "0"}), "--rate"},
        BadArgs{"rate_negative", with({"--rate", "-3"}), "--rate"},
        BadArgs{"rate_nan", with({"--rate", "nan"}), "--rate"},
        BadArgs{"rate_inf", with({"--rate", "inf"}), "--rate"},
        BadArgs{"rate_text", with({"--rate", "fast"}), "--rate"},
        BadArgs{"max_replays_zero", with({"--max-replays", "0"}), "--max-replays"},
        BadArgs{"max_replays_negative", with({"--max-replays", "-2"}), "--max-replays"},
        BadArgs{"max_replays_huge", with({"--max-replays", "99999999999"}), "--max-replays"},
        BadArgs{"missing_value", with({"--limit"}), "limit"},
        BadArgs{"unknown_option", with({"--requeue"}), "unrecognised option"},
        BadArgs{"positional", with({"extra"}), "positional"},
        BadArgs{"given_twice", with({"--to", "r"}), "more than once"},
        BadArgs{"group_by_unknown", with({"--group-by", "reason,colour"}), "'colour' is not a key"},
        BadArgs{"group_by_empty_part", with({"--group-by", "reason,"}), "'' is not a key"},
        BadArgs{"where_no_equals", with({"--where", "reason"}), "KEY=VALUE"},
        BadArgs{"where_unknown_key", with({"--where", "colour=red"}), "KEY=VALUE"},
        BadArgs{"since_no_unit", with({"--since", "10"}), "--since"},
        BadArgs{"until_not_shorter", with({"--since", "1h", "--until", "2h"}), "--until"},
        BadArgs{"format_unknown", with({"--format", "yaml"}), "--format"},
        BadArgs{"ca_file_without_amqps", with({"--ca-file", "ca.pem"}), "--ca-file needs an amqps"},
        BadArgs{"no_verify_without_amqps", with({"--no-verify"}), "--no-verify needs an amqps"},
        BadArgs{"cert_without_key",
                {"--upstream", kTlsUrl, "--from", "q.dlq", "--to", "q", "--cert-file", "c.pem"},
                "--cert-file and --key-file go together"},
        BadArgs{"external_without_cert",
                {"--upstream", "amqps://rabbit/?auth_mechanism=external", "--from", "q.dlq", "--to",
                 "q"},
                "--cert-file and --key-file"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(ParseCount, IsStrict) {
  EXPECT_EQ(parse_count("0"), 0u);
  EXPECT_EQ(parse_count("18446744073709551615"), 18446744073709551615u);
  EXPECT_EQ(parse_count("18446744073709551616"), std::nullopt);
  EXPECT_EQ(parse_count("+1"), std::nullopt);
  EXPECT_EQ(parse_count(" 1"), std::nullopt);
  EXPECT_EQ(parse_count(""), std::nullopt);
}

TEST(ParseRate, AcceptsFractionsAndRejectsTheRest) {
  EXPECT_EQ(parse_rate("0.5"), 0.5);
  EXPECT_EQ(parse_rate("100"), 100.0);
  EXPECT_EQ(parse_rate("1e3"), 1000.0);
  EXPECT_EQ(parse_rate("1/s"), std::nullopt);
  EXPECT_EQ(parse_rate(""), std::nullopt);
}

}  // namespace
}  // namespace nackguard::replay
