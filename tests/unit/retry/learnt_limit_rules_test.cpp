// The delivery limit a queue has, from the management API's answer, on RabbitMQ 3.x, 4.0-4.2
// and 4.3: one row per case, each checked on every version it names.

#include "proxy/retry/learnt_limit_rules.hpp"

#include <gtest/gtest.h>

#include <cctype>
#include <string>
#include <vector>

namespace nackguard::retry {
namespace {

using Source = LimitSource;
using Type = QueueFacts::Type;

constexpr BrokerVersion k310{3, 10};
constexpr BrokerVersion k313{3, 13};
constexpr BrokerVersion k40{4, 0};
constexpr BrokerVersion k42{4, 2};
constexpr BrokerVersion k43{4, 3};

struct Expected {
  std::optional<std::uint32_t> limit;
  Source source;
};

struct Case {
  const char* name;
  const char* json;
  Expected v3;   // 3.10 and 3.13
  Expected v40;  // 4.0 and 4.2
  Expected v43;  // 4.3
};

// A queue as GET /api/queues/VHOST/NAME shows it (only the fields read).
std::string quorum(const std::string& arguments, const std::string& effective,
                   const std::string& policy = "", const std::string& op_policy = "") {
  return R"({"name":"orders","vhost":"/","type":"quorum","arguments":)" + arguments +
         R"(,"effective_policy_definition":)" + effective + R"(,"policy":")" + policy +
         R"(","operator_policy":")" + op_policy + R"(","messages":0})";
}

const std::string kNoArgs = "{}";
const std::string kNoPolicy = "[]";  // an empty Erlang proplist
const std::string kArg10 = quorum(R"({"x-delivery-limit":10})", kNoPolicy);
const std::string kPolicy5 = quorum(kNoArgs, R"({"delivery-limit":5})", "dl");
const std::string kArg10Policy3 =
    quorum(R"({"x-delivery-limit":10})", R"({"delivery-limit":3})", "dl");
const std::string kArg2Policy5 =
    quorum(R"({"x-delivery-limit":2})", R"({"delivery-limit":5})", "dl");
const std::string kArg4Policy4 =
    quorum(R"({"x-delivery-limit":4})", R"({"delivery-limit":4})", "dl");
const std::string kNeither = quorum(kNoArgs, kNoPolicy);
const std::string kArgMinus1 = quorum(R"({"x-delivery-limit":-1})", kNoPolicy);
const std::string kArgMinus1Policy5 =
    quorum(R"({"x-delivery-limit":-1})", R"({"delivery-limit":5})", "dl");
const std::string kArg3PolicyMinus1 =
    quorum(R"({"x-delivery-limit":3})", R"({"delivery-limit":-1})", "off");
const std::string kPolicyMinus1 = quorum(kNoArgs, R"({"delivery-limit":-1})", "off");
const std::string kOperator6 = quorum(kNoArgs, R"({"delivery-limit":6})", "", "ops");
const std::string kBoth4 = quorum(kNoArgs, R"({"delivery-limit":4})", "dl", "ops");
const std::string kOtherKeysOnly = quorum(kNoArgs, R"({"max-length":100})", "len");
const std::string kArgText = quorum(R"({"x-delivery-limit":"7"})", kNoPolicy);
const std::string kArgTextPolicy5 =
    quorum(R"({"x-delivery-limit":"7"})", R"({"delivery-limit":5})", "dl");
const std::string kArgReal = quorum(R"({"x-delivery-limit":5.5})", kNoPolicy);
const std::string kArgZero = quorum(R"({"x-delivery-limit":0})", kNoPolicy);
const std::string kArgHuge = quorum(R"({"x-delivery-limit":99999999999})", kNoPolicy);
const std::string kClassic = R"({"name":"q","type":"classic","arguments":{"x-delivery-limit":3},)"
                             R"("effective_policy_definition":{"delivery-limit":3},"policy":"dl"})";
const std::string kStream = R"({"name":"s","type":"stream","arguments":{},"policy":""})";

const std::vector<Case> kCases = {
    {"argument alone",
     kArg10.c_str(),
     {10, Source::argument},
     {10, Source::argument},
     {10, Source::argument}},
    {"policy alone",
     kPolicy5.c_str(),
     {5, Source::policy},
     {5, Source::policy},
     {5, Source::policy}},
    // (c) and (d): the smaller of the two, on every version.
    {"argument 10, policy 3",
     kArg10Policy3.c_str(),
     {3, Source::policy},
     {3, Source::policy},
     {3, Source::policy}},
    {"argument 2, policy 5",
     kArg2Policy5.c_str(),
     {2, Source::argument},
     {2, Source::argument},
     {2, Source::argument}},
    {"a tie goes to the argument",
     kArg4Policy4.c_str(),
     {4, Source::argument},
     {4, Source::argument},
     {4, Source::argument}},
    {"neither: 4.x's default",
     kNeither.c_str(),
     {std::nullopt, Source::none},
     {20, Source::broker_default},
     {20, Source::broker_default}},
    {"another policy key only",
     kOtherKeysOnly.c_str(),
     {std::nullopt, Source::none},
     {20, Source::broker_default},
     {20, Source::broker_default}},
    // 3.x keeps -1, which the first return passes; 4.x reads it as no limit.
    {"argument -1",
     kArgMinus1.c_str(),
     {0, Source::argument},
     {std::nullopt, Source::argument},
     {std::nullopt, Source::argument}},
    // 4.x takes the max when one is negative; 3.x the min.
    {"argument -1, policy 5",
     kArgMinus1Policy5.c_str(),
     {0, Source::argument},
     {5, Source::policy},
     {5, Source::policy}},
    // (3.x refuses a negative delivery-limit in a policy; were it there, min would keep it.)
    {"argument 3, policy -1",
     kArg3PolicyMinus1.c_str(),
     {0, Source::policy},
     {3, Source::argument},
     {3, Source::argument}},
    {"policy -1",
     kPolicyMinus1.c_str(),
     {0, Source::policy},
     {std::nullopt, Source::policy},
     {std::nullopt, Source::policy}},
    {"operator policy alone",
     kOperator6.c_str(),
     {6, Source::operator_policy},
     {6, Source::operator_policy},
     {6, Source::operator_policy}},
    {"policy and operator policy",
     kBoth4.c_str(),
     {4, Source::policies},
     {4, Source::policies},
     {4, Source::policies}},
    // A string never compares below a count; 4.3 takes the default for a non-integer.
    {"argument \"7\"",
     kArgText.c_str(),
     {std::nullopt, Source::argument},
     {std::nullopt, Source::argument},
     {20, Source::broker_default}},
    {"argument \"7\", policy 5",
     kArgTextPolicy5.c_str(),
     {5, Source::policy},
     {5, Source::policy},
     {5, Source::policy}},
    {"argument 5.5",
     kArgReal.c_str(),
     {5, Source::argument},
     {5, Source::argument},
     {20, Source::broker_default}},
    {"argument 0",
     kArgZero.c_str(),
     {0, Source::argument},
     {0, Source::argument},
     {0, Source::argument}},
    {"argument past 32 bits",
     kArgHuge.c_str(),
     {4294967295u, Source::argument},
     {4294967295u, Source::argument},
     {4294967295u, Source::argument}},
    {"classic queue",
     kClassic.c_str(),
     {std::nullopt, Source::none},
     {std::nullopt, Source::none},
     {std::nullopt, Source::none}},
    {"stream",
     kStream.c_str(),
     {std::nullopt, Source::none},
     {std::nullopt, Source::none},
     {std::nullopt, Source::none}},
};

class LearntLimitRules : public ::testing::TestWithParam<Case> {};

void check(const Case& c, BrokerVersion version, const Expected& expected) {
  const QueueJsonReading reading = read_queue_json(c.json, version);
  ASSERT_EQ(reading.outcome, QueueJsonReading::Outcome::ok) << reading.problem;
  EXPECT_EQ(reading.limit.limit, expected.limit)
      << c.name << " on " << version.major << "." << version.minor;
  EXPECT_EQ(to_string(reading.limit.source), to_string(expected.source))
      << c.name << " on " << version.major << "." << version.minor;
}

TEST_P(LearntLimitRules, OnEveryVersion) {
  const Case& c = GetParam();
  for (BrokerVersion version : {k310, k313}) check(c, version, c.v3);
  for (BrokerVersion version : {k40, k42}) check(c, version, c.v40);
  check(c, k43, c.v43);
}

INSTANTIATE_TEST_SUITE_P(Table, LearntLimitRules, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           std::string name;
                           for (const char* p = info.param.name; *p; ++p) {
                             name += std::isalnum(static_cast<unsigned char>(*p)) ? *p : '_';
                           }
                           return name;
                         });

TEST(LearntLimitRules, TheQueueTypeComesWithTheLimit) {
  EXPECT_EQ(read_queue_json(kArg10, k310).limit.type, Type::quorum);
  EXPECT_EQ(read_queue_json(kClassic, k40).limit.type, Type::classic);
  EXPECT_EQ(read_queue_json(kStream, k40).limit.type, Type::stream);
}

TEST(LearntLimitRules, AQuorumQueueWithoutStatisticsIsNotKnownYet) {
  // 3.x shows the policies from the queue's statistics, a few seconds after the declare.
  const char* fresh = R"({"name":"orders","type":"quorum","arguments":{"x-delivery-limit":9}})";
  EXPECT_EQ(read_queue_json(fresh, k310).outcome, QueueJsonReading::Outcome::no_statistics_yet);
  const char* classic = R"({"name":"q","type":"classic","arguments":{}})";
  EXPECT_EQ(read_queue_json(classic, k310).outcome, QueueJsonReading::Outcome::ok);
}

TEST(LearntLimitRules, WhatIsNotAQueueIsMalformed) {
  for (const char* text :
       {"", "not json", "[1,2]", R"({"error":"Object Not Found"})", R"({"type":7})"}) {
    const QueueJsonReading reading = read_queue_json(text, k310);
    EXPECT_EQ(reading.outcome, QueueJsonReading::Outcome::malformed) << text;
    EXPECT_FALSE(reading.problem.empty()) << text;
  }
}

TEST(BrokerVersion, FromTheOverview) {
  std::string problem;
  EXPECT_EQ(read_overview_json(R"({"rabbitmq_version":"3.10.8","x":1})", problem),
            (BrokerVersion{3, 10}));
  EXPECT_EQ(read_overview_json(R"({"rabbitmq_version":"4.3.0-rc.1"})", problem),
            (BrokerVersion{4, 3}));
  EXPECT_EQ(read_overview_json(R"({"management_version":"3.10.8"})", problem), std::nullopt);
  EXPECT_NE(problem.find("rabbitmq_version"), std::string::npos);
  EXPECT_EQ(read_overview_json(R"({"rabbitmq_version":"next"})", problem), std::nullopt);
  EXPECT_EQ(read_overview_json("<html>", problem), std::nullopt);
}

TEST(BrokerVersion, Parses) {
  EXPECT_EQ(parse_broker_version("4.2.3+2.g1234abc"), (BrokerVersion{4, 2}));
  EXPECT_EQ(parse_broker_version("3.13"), (BrokerVersion{3, 13}));
  EXPECT_EQ(parse_broker_version("4"), std::nullopt);
  EXPECT_EQ(parse_broker_version("0.9.1"), std::nullopt);
  EXPECT_EQ(parse_broker_version(""), std::nullopt);
}

}  // namespace
}  // namespace nackguard::retry
