// "queue_limits" in /status.json and in `nackguard status`: the rows of the management API's
// lookups, in whatever state each is.

#include "proxy/status/queue_limits.hpp"

#include <gtest/gtest.h>

#include <boost/json/parse.hpp>

#include "proxy/status/status_board.hpp"
#include "proxy/status/status_cli.hpp"

namespace nackguard::status {
namespace {

namespace json = boost::json;
using retry::LimitSource;
using retry::LookupState;
using Type = retry::QueueFacts::Type;

constexpr std::int64_t kWall = 1'780'000'000'000;  // 2026-05-28T20:26:40Z

std::vector<retry::LearntLimitRow> learnt() {
  return {
      {{"/", "orders"}, {LookupState::known, {Type::quorum, 5, LimitSource::policy}, 4000}, ""},
      {{"shop", "gone"}, {LookupState::not_found, {}, 3000}, ""},
      {{"/", "jobs"}, {LookupState::pending, {}, 0}, ""},
      {{"/", "audit"},
       {LookupState::failed, {Type::quorum, 20, LimitSource::broker_default}, 2000},
       "the management API at rabbit:15672 answered 401"},
  };
}

TEST(QueueLimits, RowsFromTheManagementApi) {
  const std::vector<QueueLimitRow> rows = management_rows(learnt(), 5000, kWall);
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].vhost, "/");
  EXPECT_EQ(rows[0].queue, "orders");
  EXPECT_EQ(rows[0].type, "quorum");
  EXPECT_EQ(rows[0].limit, 5u);
  EXPECT_EQ(rows[0].source, "policy");
  EXPECT_EQ(rows[0].learnt_from, "management_api");
  EXPECT_EQ(rows[0].state, "known");
  EXPECT_EQ(rows[0].learnt_wall_ms, kWall - 1000);
  EXPECT_EQ(rows[2].learnt_wall_ms, std::nullopt);
  EXPECT_EQ(rows[3].state, "failed");
  EXPECT_EQ(rows[3].limit, 20u);  // the last answer's
  EXPECT_EQ(rows[3].error, "the management API at rabbit:15672 answered 401");
}

TEST(QueueLimits, InStatusJson) {
  retry::GuardSettings settings;
  std::int64_t steady = 5000;
  retry::GuardContext context(settings, nullptr, nullptr,
                              retry::GuardClocks{[&] { return steady; }, [&] { return kWall; }});
  metrics::Registry registry;
  StatusBoard board(context, registry, "1.2.3", "pod-7");
  EXPECT_TRUE(json::parse(board.json()).at("queue_limits").as_array().empty());
  board.set_queue_limits([&] { return management_rows(learnt(), steady, kWall); });
  const json::value doc = json::parse(board.json());
  const json::array& limits = doc.at("queue_limits").as_array();
  ASSERT_EQ(limits.size(), 4u);
  EXPECT_EQ(limits[0].at("limit").as_int64(), 5);
  EXPECT_EQ(limits[0].at("source").as_string(), "policy");
  EXPECT_EQ(limits[0].at("state").as_string(), "known");
  EXPECT_EQ(limits[0].at("learnt_at").as_string(), "2026-05-28T20:26:39.000Z");
  EXPECT_TRUE(limits[0].at("error").is_null());
  EXPECT_TRUE(limits[1].at("limit").is_null());
  EXPECT_EQ(limits[1].at("vhost").as_string(), "shop");
  EXPECT_EQ(limits[3].at("state").as_string(), "failed");
  EXPECT_EQ(limits[3].at("error").as_string(), "the management API at rabbit:15672 answered 401");

  const std::string text = render_text(doc);
  EXPECT_NE(text.find("DELIVERY LIMITS"), std::string::npos) << text;
  EXPECT_NE(text.find("orders"), std::string::npos);
  EXPECT_NE(text.find("broker_default  management_api  failed"), std::string::npos) << text;
}

TEST(QueueLimits, NoTableWithoutRows) {
  EXPECT_EQ(render_text(json::parse(R"({"queue_limits":[]})")).find("DELIVERY LIMITS"),
            std::string::npos);
}

}  // namespace
}  // namespace nackguard::status
