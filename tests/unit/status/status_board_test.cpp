// /status.json from the shared guard state: the top messages with what their next return
// brings, identities only when asked, the queues' counts, the limits, the reloads; bounded
// with a full tracker.

#include "proxy/status/status_board.hpp"

#include <gtest/gtest.h>

#include <boost/json/parse.hpp>

namespace nackguard::status {
namespace {

namespace json = boost::json;

constexpr std::int64_t kWall = 1'780'000'000'000;  // 2026-05-28T20:26:40Z

class StatusBoardTest : public testing::Test {
 protected:
  StatusBoardTest() {
    retry::Policy orders;
    orders.queue = "orders";
    orders.max_redeliveries = 3;
    orders.rate.per_message = 1000;
    orders.source = "/etc/nackguard/policies/orders.yaml";
    settings.tracker_max_entries = 200000;  // room for 100,000 whatever their shards
    context = std::make_unique<retry::GuardContext>(
        settings, std::make_shared<const retry::PolicySet>(std::vector{orders}), nullptr,
        retry::GuardClocks{[this] { return steady; }, [this] { return kWall + steady; }});
    board = std::make_unique<StatusBoard>(*context, registry, "1.2.3", "pod-7");
    StatusConfig config;
    config.file = "/etc/nackguard/nackguard.yaml";
    config.policies_dir = "/etc/nackguard/policies";
    config.policies = 1;
    board->set_config(config);
  }

  // `returns` counted returns of `id` on `queue`, as the guard records them.
  // `copy_id`: the copy of nackguard's the returns were counted on (0: the original).
  void loop(const std::string& queue, const std::string& id, std::uint32_t returns,
            std::uint64_t copy_id = 0) {
    const retry::TrackerKey key = retry::make_key(queue, id);
    for (std::uint32_t i = 0; i < returns; ++i) {
      registry.delivery(queue);
      registry.returned(queue);
      registry.requeue(queue, retry::Action::forward);
      context->tracker().upsert(key, steady, [&](retry::TrackerEntry& e) {
        e.copy_id = copy_id;
        ++e.returns;
        ++e.deliveries;
        if (e.first_return_ms == 0) e.first_return_ms = kWall + steady;
        e.last_return_ms = kWall + steady;
      });
      context->tracker_names().record(key, queue, id);
    }
  }

  json::object status() { return json::parse(board->json()).as_object(); }

  std::int64_t steady = 1000;
  retry::GuardSettings settings;
  metrics::Registry registry;
  std::unique_ptr<retry::GuardContext> context;
  std::unique_ptr<StatusBoard> board;
};

TEST_F(StatusBoardTest, TopMessagesWithWhatTheirNextReturnBrings) {
  loop("orders", "order-17", 2);
  loop("orders", "order-18", 3);
  loop("other", "x-1", 1);
  const json::object s = status();
  const json::array& top = s.at("top").as_array();
  ASSERT_EQ(top.size(), 3u);
  const json::object& first = top[0].as_object();
  EXPECT_EQ(first.at("id").as_string(), retry::short_id(retry::make_key("orders", "order-18")));
  EXPECT_EQ(first.at("queue").as_string(), "orders");
  EXPECT_EQ(first.at("returns").as_int64(), 3);
  EXPECT_EQ(first.at("deliveries").as_int64(), 3);
  EXPECT_EQ(first.at("first_return").as_string(), "2026-05-28T20:26:41.000Z");
  EXPECT_FALSE(first.contains("identity"));
  // 3 of 3: the next return passes max_redeliveries.
  EXPECT_EQ(first.at("next").at("action").as_string(), "dead_letter");
  EXPECT_EQ(first.at("next").at("reason").as_string(), "max_redeliveries");
  EXPECT_EQ(first.at("next").at("when").as_string(), "next_return");
  EXPECT_EQ(first.at("next").at("policy").as_string(), "orders.yaml");
  const json::object& second = top[1].as_object();
  EXPECT_EQ(second.at("returns").as_int64(), 2);
  EXPECT_EQ(second.at("next").at("action").as_string(), "requeue");
  // "other" falls to the built-in default.
  EXPECT_EQ(top[2].at("next").at("policy").as_string(), "built-in default");
  EXPECT_EQ(s.at("tracker_sampled").as_int64(), 3);
}

// The count of a message nackguard copied is the count on its copy: the prediction starts
// from it (it started from 0, and said requeue where the next return dead-lettered).
TEST_F(StatusBoardTest, TheNextReturnOfACopiedMessageCountsFromItsCopy) {
  loop("orders", "order-19", 3, 0x5eed);
  const json::object s = status();
  const json::object& next = s.at("top").at(0).at("next").as_object();
  EXPECT_EQ(next.at("action").as_string(), "dead_letter");
  EXPECT_EQ(next.at("reason").as_string(), "max_redeliveries");
}

TEST_F(StatusBoardTest, IdentitiesOnlyWhenShown) {
  loop("orders", "order-secret-17", 1);
  EXPECT_EQ(board->json().find("order-secret-17"), std::string::npos);
  StatusConfig config;
  config.show_identities = true;
  board->set_config(config);
  EXPECT_EQ(board->json().find("order-secret-17"), std::string::npos)
      << "recorded while hidden: not kept, so not shown";
  loop("orders", "order-secret-17", 1);
  const json::object s = status();
  EXPECT_EQ(s.at("top").at(0).at("identity").as_string(), "order-secret-17");
  EXPECT_TRUE(s.at("config").at("show_identities").as_bool());
  config.show_identities = false;
  board->set_config(config);
  EXPECT_EQ(board->json().find("order-secret-17"), std::string::npos);
}

TEST_F(StatusBoardTest, AForgottenNameShowsTheIdAlone) {
  context->tracker().upsert(retry::make_key("orders", "m"), steady,
                            [](retry::TrackerEntry& e) { e.returns = 4; });
  const json::object s = status();
  const json::object& entry = s.at("top").at(0).as_object();
  EXPECT_TRUE(entry.at("queue").is_null());
  EXPECT_TRUE(entry.at("next").is_null());
  EXPECT_EQ(entry.at("id").as_string(), retry::short_id(retry::make_key("orders", "m")));
}

TEST_F(StatusBoardTest, APendingCrashDecisionIsDueAtTheNextDelivery) {
  context->tracker().upsert(retry::make_key("orders", "m"), steady, [](retry::TrackerEntry& e) {
    e.returns = 1;
    e.crash_suspect = true;
    e.pending_action = retry::Action::delay;
    e.pending_delay_ms = 5000;
  });
  context->tracker_names().record(retry::make_key("orders", "m"), "orders", "m");
  const json::object s = status();
  const json::object& next = s.at("top").at(0).at("next").as_object();
  EXPECT_EQ(next.at("action").as_string(), "delay");
  EXPECT_EQ(next.at("delay_ms").as_int64(), 5000);
  EXPECT_EQ(next.at("when").as_string(), "next_delivery");
}

TEST_F(StatusBoardTest, QueuesOverTheWindowAndSinceStart) {
  board->tick();  // the baseline, at 1 s
  loop("orders", "a", 2);
  steady += 31'000;
  board->tick();  // a snapshot at 32 s: 2 returns
  loop("orders", "b", 1);
  steady += 5 * 60'000;  // the first snapshot is out of the window, the second is the baseline
  const json::object s = status();
  EXPECT_EQ(s.at("window_seconds").as_int64(), 300);
  const json::object& q = s.at("queues").at(0).as_object();
  EXPECT_EQ(q.at("queue").as_string(), "orders");
  EXPECT_EQ(q.at("window").at("returns").as_int64(), 1);
  EXPECT_EQ(q.at("total").at("returns").as_int64(), 3);
  EXPECT_EQ(q.at("total").at("returns_became").at("forwarded").as_int64(), 3);
  EXPECT_EQ(q.at("total").at("dead_letters").at("max_redeliveries").as_int64(), 0);
  EXPECT_FALSE(q.at("outage").as_bool());
  EXPECT_EQ(q.at("policy").as_string(), "orders.yaml");
}

TEST_F(StatusBoardTest, LimitsAndReloads) {
  loop("orders", "a", 1);
  registry.client_connected();
  registry.policy_reload(false);
  board->reloaded(ReloadRecord{kWall, false, "policies/orders.yaml:3:1: bad"});
  const json::object s = status();
  const json::object& limits = s.at("limits").as_object();
  EXPECT_EQ(limits.at("tracker_entries").as_int64(), 1);
  EXPECT_EQ(limits.at("tracker_max_entries").as_int64(), 200000);
  EXPECT_EQ(limits.at("client_connections").as_int64(), 1);
  EXPECT_EQ(limits.at("retained_body_bytes_limit").as_int64(), 256 << 20);
  const json::object& config = s.at("config").as_object();
  EXPECT_EQ(config.at("file").as_string(), "/etc/nackguard/nackguard.yaml");
  EXPECT_EQ(config.at("reloads").at("error").as_int64(), 1);
  EXPECT_EQ(config.at("last_reload").at("result").as_string(), "error");
  EXPECT_EQ(config.at("last_reload").at("message").as_string(), "policies/orders.yaml:3:1: bad");
  EXPECT_EQ(s.at("nackguard").at("host").as_string(), "pod-7");
}

TEST_F(StatusBoardTest, BoundedWithAHundredThousandTrackedMessages) {
  StatusConfig config;
  config.show_identities = true;
  board->set_config(config);
  for (int i = 0; i < 100000; ++i) {
    const std::string id = std::string(150, 'i') + std::to_string(i);
    const retry::TrackerKey key = retry::make_key("orders", id);
    context->tracker().upsert(key, steady, [&](retry::TrackerEntry& e) { e.returns = 1 + i % 7; });
    context->tracker_names().record(key, "orders", id);
    registry.delivery("q" + std::to_string(i % 500));
  }
  const std::string page = board->json();
  const json::object s = json::parse(page).as_object();
  EXPECT_EQ(s.at("top").as_array().size(), kTopMessages);
  EXPECT_EQ(s.at("queues").as_array().size(), kMaxQueues);
  EXPECT_EQ(s.at("limits").at("tracker_entries").as_int64(), 100000);
  EXPECT_EQ(s.at("tracker_sampled").as_int64(), 16 * static_cast<std::int64_t>(kVisitPerShard));
  EXPECT_LT(page.size(), 128u * 1024) << "the page's size is bounded";
  EXPECT_EQ(context->tracker_names().size(), context->tracker_names().capacity());
}

}  // namespace
}  // namespace nackguard::status
