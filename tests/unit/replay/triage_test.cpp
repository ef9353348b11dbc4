// Triage keys, conditions and durations (triage.hpp), the replayer's selection and grouping
// against the fake broker, and the JSON summary.
#include "proxy/replay/triage.hpp"

#include <gtest/gtest.h>

#include <boost/json/parse.hpp>

#include "proxy/replay/report.hpp"
#include "replay/fake_broker.hpp"

namespace nackguard::replay {
namespace {

using amqp::FieldValue;
using namespace replay_test;
using Log = std::vector<std::string>;

constexpr std::int64_t kMay1 = 1714564800;  // 2024-05-01T12:00:00Z

// A dead-letter from source `source`, last returned at `last` (epoch seconds).
Message from_source(std::string id, std::string source, std::int64_t last,
                    std::string reason = "max_redeliveries") {
  Message m = dead_letter(std::move(id), std::move(reason));
  amqp::FieldTable& headers = *m.header.properties.headers;
  headers.set("source_id", FieldValue::string(std::move(source)));
  headers.set("x-nackguard-queue", FieldValue::string("orders"));
  headers.set("x-nackguard-first-return", FieldValue::timestamp(last - 60));
  headers.set("x-nackguard-last-return", FieldValue::timestamp(last));
  return m;
}

TEST(TriageKey, ParsesEveryKindAndRefusesTheRest) {
  using Kind = TriageKey::Kind;
  EXPECT_EQ(parse_key("reason"), (TriageKey{Kind::reason, {}}));
  EXPECT_EQ(parse_key("queue"), (TriageKey{Kind::queue, {}}));
  EXPECT_EQ(parse_key("consumer"), (TriageKey{Kind::consumer, {}}));
  EXPECT_EQ(parse_key("day"), (TriageKey{Kind::day, {}}));
  EXPECT_EQ(parse_key("header:task"), (TriageKey{Kind::header, "task"}));
  EXPECT_EQ(parse_key("header:task")->name(), "header:task");
  for (const char* wrong : {"", "header:", "Reason", "header", "x-nackguard-reason"}) {
    EXPECT_FALSE(parse_key(wrong)) << wrong;
  }
}

TEST(TriageKey, ValuesFromTheHeaders) {
  Message m = from_source("m1", "A", kMay1);
  m.header.properties.headers->set("attempt", FieldValue::i32(7));
  m.header.properties.headers->set("nested", FieldValue::table({}));
  const amqp::BasicProperties& p = m.header.properties;
  EXPECT_EQ(key_value(*parse_key("reason"), p), "max_redeliveries");
  EXPECT_EQ(key_value(*parse_key("queue"), p), "orders");
  EXPECT_EQ(key_value(*parse_key("consumer"), p), "(no consumer)");
  EXPECT_EQ(key_value(*parse_key("header:source_id"), p), "A");
  EXPECT_EQ(key_value(*parse_key("header:attempt"), p), "7");
  EXPECT_EQ(key_value(*parse_key("header:nested"), p), "(no header:nested)");
  EXPECT_EQ(key_value(*parse_key("header:absent"), p), "(no header:absent)");
  EXPECT_EQ(key_value(*parse_key("day"), p), "2024-05-01");
  EXPECT_EQ(iso_time(kMay1), "2024-05-01T12:00:00Z");
  EXPECT_EQ(key_value(*parse_key("day"), amqp::BasicProperties{}), "(no day)");
}

TEST(TriageCondition, KeyEqualsValue) {
  std::optional<Condition> c = parse_condition("header:source_id=A=B");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->key.name(), "header:source_id");
  EXPECT_EQ(c->value, "A=B");
  EXPECT_EQ(parse_condition("reason=")->value, "");
  EXPECT_FALSE(parse_condition("reason"));
  EXPECT_FALSE(parse_condition("colour=red"));
}

TEST(TriageDuration, WholeNumberAndUnit) {
  EXPECT_EQ(parse_duration("90s"), std::chrono::seconds(90));
  EXPECT_EQ(parse_duration("15m"), std::chrono::seconds(900));
  EXPECT_EQ(parse_duration("2h"), std::chrono::seconds(7200));
  EXPECT_EQ(parse_duration("7d"), std::chrono::seconds(604800));
  for (const char* wrong : {"", "m", "0m", "-5m", "1.5h", "10", "10w", "h2"}) {
    EXPECT_FALSE(parse_duration(wrong)) << wrong;
  }
}

TEST(TriageSelection, EveryConditionAndTheWindow) {
  const amqp::BasicProperties p = from_source("m1", "A", kMay1).header.properties;
  Selection s;
  EXPECT_TRUE(selected(s, p));  // an empty selection takes everything
  EXPECT_TRUE(selected(s, amqp::BasicProperties{}));
  s.where = {*parse_condition("header:source_id=A"), *parse_condition("reason=max_redeliveries")};
  EXPECT_TRUE(selected(s, p));
  s.where.push_back(*parse_condition("queue=invoices"));
  EXPECT_FALSE(selected(s, p));
  s.where.clear();
  s.since_s = kMay1;  // the bounds are inclusive
  EXPECT_TRUE(selected(s, p));
  s.since_s = kMay1 + 1;
  EXPECT_FALSE(selected(s, p));
  s.since_s.reset();
  s.until_s = kMay1 - 1;
  EXPECT_FALSE(selected(s, p));
  EXPECT_FALSE(selected(s, amqp::BasicProperties{}));  // no last return: outside any window
}

// Two sources, two reasons: --where header:source_id=A moves exactly A's messages; the others
// are requeued at the end, in their order; a dry run counts the same.
TEST(ReplayerTriage, WhereMovesOnlyTheSelectedAndLeavesTheRestInOrder) {
  std::vector<Message> dlq = {from_source("a1", "A", kMay1), from_source("b1", "B", kMay1),
                              from_source("a2", "A", kMay1 + 3600, "crash_loop"),
                              from_source("b2", "B", kMay1 + 60, "crash_loop")};
  for (bool dry_run : {true, false}) {
    FakeBroker broker(dlq);
    Plan plan = plan_for(broker);
    plan.dry_run = dry_run;
    plan.selection.where = {*parse_condition("header:source_id=A")};
    plan.group_by = {*parse_key("header:source_id"), *parse_key("reason")};
    Summary s = run(broker, plan);
    EXPECT_EQ(s.moved, 2u) << dry_run;
    EXPECT_EQ(s.not_selected, 2u);
    EXPECT_EQ(s.group_by, (std::vector<std::string>{"header:source_id", "reason"}));
    ASSERT_EQ(s.groups.size(), 2u);
    const GroupCounts& crash = s.groups[{"A", "crash_loop"}];
    EXPECT_EQ(crash.moved, 1u);
    EXPECT_EQ(crash.first_return_s, kMay1 + 3600 - 60);
    EXPECT_EQ(crash.last_return_s, kMay1 + 3600);
    EXPECT_EQ((s.groups[{"A", "max_redeliveries"}].moved), 1u);
    std::vector<std::string> left;
    for (const Message& m : broker.ready) left.push_back(id_of(m.header));
    EXPECT_EQ(left, dry_run ? (Log{"a1", "b1", "a2", "b2"}) : (Log{"b1", "b2"}));
  }
}

TEST(ReplayerTriage, SinceLeavesTheOlderOnes) {
  FakeBroker broker({from_source("old", "A", kMay1), from_source("new", "A", kMay1 + 7200)});
  Plan plan = plan_for(broker);
  plan.selection.since_s = kMay1 + 3600;
  Summary s = run(broker, plan);
  EXPECT_EQ(s.moved, 1u);
  EXPECT_EQ(s.not_selected, 1u);
  ASSERT_EQ(broker.published.size(), 1u);
  EXPECT_EQ(id_of(broker.published[0].header), "new");
  ASSERT_EQ(broker.ready.size(), 1u);
  EXPECT_EQ(id_of(broker.ready[0].header), "old");
}

TEST(RenderJson, SameContentAsTheSummary) {
  FakeBroker broker({from_source("a1", "A", kMay1), from_source("b1", "B", kMay1 + 60),
                     dead_letter("c1", "crash_loop", 3)});
  Plan plan = plan_for(broker);
  plan.dry_run = true;
  plan.group_by = {*parse_key("header:source_id")};
  Summary s = run(broker, plan);
  boost::json::value doc =
      boost::json::parse(render_json(s, RunInfo{"orders.dlq", "orders", "rabbit:5672", "/", 3}));
  const boost::json::object& o = doc.as_object();
  EXPECT_EQ(o.at("from").as_string(), "orders.dlq");
  EXPECT_TRUE(o.at("dry_run").as_bool());
  EXPECT_EQ(o.at("looked_at").to_number<int>(), 3);
  EXPECT_EQ(o.at("moved").to_number<int>(), 2);
  EXPECT_EQ(o.at("at_ceiling").to_number<int>(), 1);
  EXPECT_EQ(o.at("ceiling_ids").as_array().size(), 1u);
  EXPECT_EQ(o.at("requeued").to_number<int>(), 3);
  EXPECT_EQ(o.at("requeued_often_returned").to_number<int>(), 0);
  EXPECT_EQ(o.at("most_returns").to_number<int>(), 0);
  EXPECT_EQ(o.at("stopped").as_string(), "the queue is empty");
  const boost::json::array& groups = o.at("groups").as_array();
  ASSERT_EQ(groups.size(), 3u);  // in key order: the one without source_id, A, B
  const boost::json::object& none = groups[0].as_object();
  EXPECT_EQ(none.at("key").as_object().at("header:source_id").as_string(), "(no header:source_id)");
  EXPECT_EQ(none.at("at_ceiling").to_number<int>(), 1);
  EXPECT_TRUE(none.at("last_return").is_null());
  const boost::json::object& a = groups[1].as_object();
  EXPECT_EQ(a.at("key").as_object().at("header:source_id").as_string(), "A");
  EXPECT_EQ(a.at("moved").to_number<int>(), 1);
  EXPECT_EQ(a.at("first_return").as_string(), "2024-05-01T11:59:00Z");
  EXPECT_EQ(a.at("last_return").as_string(), "2024-05-01T12:00:00Z");
}

}  // namespace
}  // namespace nackguard::replay
