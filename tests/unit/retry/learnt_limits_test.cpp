// LearntLimits: what lookups answer and ask for, the refresh, failures, and the bound. The
// time is passed in: no test sleeps.

#include "proxy/retry/learnt_limits.hpp"

#include <gtest/gtest.h>

#include <thread>

namespace nackguard::retry {
namespace {

using std::chrono::milliseconds;
using Type = QueueFacts::Type;

constexpr std::int64_t kRefresh = 60000;
constexpr std::int64_t kRetry = 5000;

LearntLimitsSettings settings(std::size_t max_queues = 100) {
  return {max_queues, milliseconds(kRefresh), milliseconds(kRetry)};
}

const QueueKey kOrders{"/", "orders"};
const QueueLimit kFive{Type::quorum, 5, LimitSource::policy};
const QueueLimit kSeven{Type::quorum, 7, LimitSource::policy};

std::vector<QueueKey> keys(std::initializer_list<QueueKey> list) {
  return list;
}

TEST(LearntLimits, AFirstLookupIsPendingAndWanted) {
  LearntLimits limits(settings());
  EXPECT_EQ(limits.lookup("/", "orders", 1000).state, LookupState::pending);
  EXPECT_EQ(limits.lookup("/", "orders", 1001).state, LookupState::pending);
  EXPECT_EQ(limits.take_wanted(10, 1002), keys({kOrders}));  // once, however often asked
  EXPECT_TRUE(limits.take_wanted(10, 1003).empty());
  EXPECT_EQ(limits.lookup("/", "orders", 1004).state, LookupState::pending);
  EXPECT_TRUE(limits.take_wanted(10, 1005).empty());  // being fetched
}

TEST(LearntLimits, VhostsAreApart) {
  LearntLimits limits(settings());
  limits.lookup("/", "orders", 0);
  limits.lookup("shop", "orders", 0);
  EXPECT_EQ(limits.take_wanted(10, 0), keys({kOrders, {"shop", "orders"}}));
  limits.record(kOrders, kFive, 10);
  EXPECT_EQ(limits.lookup("shop", "orders", 20).state, LookupState::pending);
  EXPECT_EQ(limits.lookup("/", "orders", 20).queue, kFive);
}

TEST(LearntLimits, AnAnswerIsKeptUntilTheRefresh) {
  LearntLimits limits(settings());
  limits.lookup("/", "orders", 0);
  limits.take_wanted(10, 0);
  const RecordChange first = limits.record(kOrders, kFive, 100);
  EXPECT_TRUE(first.changed);
  EXPECT_FALSE(first.recovered);
  LearntLimit known = limits.lookup("/", "orders", 200);
  EXPECT_EQ(known.state, LookupState::known);
  EXPECT_EQ(known.queue, kFive);
  EXPECT_EQ(known.fetched_ms, 100);
  EXPECT_EQ(limits.known(), 1u);

  EXPECT_TRUE(limits.take_wanted(10, 100 + kRefresh - 1).empty());
  limits.lookup("/", "orders", 100 + kRefresh - 1);
  EXPECT_TRUE(limits.take_wanted(10, 100 + kRefresh - 1).empty());
  // Past the refresh interval a lookup asks again, and still answers what is known.
  EXPECT_EQ(limits.lookup("/", "orders", 100 + kRefresh).state, LookupState::known);
  EXPECT_EQ(limits.take_wanted(10, 100 + kRefresh), keys({kOrders}));
  EXPECT_FALSE(limits.record(kOrders, kFive, 100 + kRefresh + 5).changed);
  EXPECT_TRUE(limits.record(kOrders, kSeven, 100 + kRefresh + 6).changed);
  EXPECT_EQ(limits.lookup("/", "orders", 100 + kRefresh + 7).queue, kSeven);
}

TEST(LearntLimits, WhatAnAnswerSaysOfTheLimitInForce) {
  LearntLimits limits(settings());
  EXPECT_EQ(in_force(limits.lookup("/", "orders", 0)), std::nullopt);  // nothing known yet
  limits.take_wanted(10, 0);
  limits.record(kOrders, kFive, 100);
  const std::optional<LimitInForce> five = in_force(limits.lookup("/", "orders", 200));
  ASSERT_TRUE(five);
  EXPECT_EQ(five->limit, 5u);
  EXPECT_EQ(five->source, LimitInForce::Source::management);
  // A classic queue has none, whatever a policy says.
  limits.record(kOrders, QueueLimit{Type::classic, std::nullopt, LimitSource::none}, 300);
  EXPECT_EQ(in_force(limits.lookup("/", "orders", 400))->source, LimitInForce::Source::classic);
  // None at all on a quorum queue (-1 on 4.x): none.
  limits.record(kOrders, QueueLimit{Type::quorum, std::nullopt, LimitSource::argument}, 500);
  EXPECT_EQ(in_force(limits.lookup("/", "orders", 600))->limit, std::nullopt);
}

TEST(LearntLimits, NoLookupNoRefresh) {
  LearntLimits limits(settings());
  limits.lookup("/", "orders", 0);
  limits.take_wanted(10, 0);
  limits.record(kOrders, kFive, 0);
  EXPECT_TRUE(limits.take_wanted(10, 10 * kRefresh).empty());  // nobody asked
}

TEST(LearntLimits, NotFoundIsAskedAgainAfterTheRefresh) {
  LearntLimits limits(settings());
  limits.lookup("/", "orders", 0);
  limits.take_wanted(10, 0);
  limits.record(kOrders, kFive, 0);
  limits.lookup("/", "orders", kRefresh);
  limits.take_wanted(10, kRefresh);
  EXPECT_FALSE(limits.record_not_found(kOrders, kRefresh).changed);
  LearntLimit gone = limits.lookup("/", "orders", kRefresh + 1);
  EXPECT_EQ(gone.state, LookupState::not_found);
  EXPECT_EQ(gone.queue.limit, std::nullopt);
  EXPECT_EQ(limits.known(), 0u);
  limits.lookup("/", "orders", 2 * kRefresh - 1);
  EXPECT_TRUE(limits.take_wanted(10, 2 * kRefresh - 1).empty());
  limits.lookup("/", "orders", 2 * kRefresh);
  EXPECT_EQ(limits.take_wanted(10, 2 * kRefresh), keys({kOrders}));
}

TEST(LearntLimits, AFailureKeepsTheLastAnswerAndIsRetriedSooner) {
  LearntLimits limits(settings());
  limits.lookup("/", "orders", 0);
  limits.take_wanted(10, 0);
  limits.record(kOrders, kFive, 50);
  limits.lookup("/", "orders", 50 + kRefresh);
  limits.take_wanted(10, 50 + kRefresh);
  const std::int64_t t = 50 + kRefresh + 10;
  EXPECT_TRUE(limits.record_failure(kOrders, "http 401", "401 Unauthorized", t).failure_is_new);
  LearntLimit failed = limits.lookup("/", "orders", t + 1);
  EXPECT_EQ(failed.state, LookupState::failed);
  EXPECT_EQ(failed.queue, kFive);
  EXPECT_EQ(failed.fetched_ms, 50);
  EXPECT_EQ(limits.known(), 0u);
  ASSERT_EQ(limits.rows(10).size(), 1u);
  EXPECT_EQ(limits.rows(10)[0].failure, "401 Unauthorized");

  limits.lookup("/", "orders", t + kRetry - 1);
  EXPECT_TRUE(limits.take_wanted(10, t + kRetry - 1).empty());
  limits.lookup("/", "orders", t + kRetry);
  EXPECT_EQ(limits.take_wanted(10, t + kRetry), keys({kOrders}));
  // The same kind again is not new; another kind is, once.
  EXPECT_FALSE(limits.record_failure(kOrders, "http 401", "again", t + kRetry).failure_is_new);
  EXPECT_TRUE(limits.record_failure(kOrders, "timeout", "slow", t + kRetry).failure_is_new);
  EXPECT_FALSE(limits.record_failure(kOrders, "http 401", "again", t + kRetry).failure_is_new);

  const RecordChange recovery = limits.record(kOrders, kSeven, t + 2 * kRetry);
  EXPECT_TRUE(recovery.recovered);
  EXPECT_TRUE(recovery.changed);
  EXPECT_EQ(limits.rows(10)[0].failure, "");
  EXPECT_TRUE(limits.record_failure(kOrders, "http 401", "x", t + 3 * kRetry).failure_is_new);
}

TEST(LearntLimits, AFirstFailureHasNoLimit) {
  LearntLimits limits(settings());
  limits.lookup("/", "orders", 0);
  limits.take_wanted(10, 0);
  limits.record_failure(kOrders, "connect", "refused", 1);
  const LearntLimit failed = limits.lookup("/", "orders", 2);
  EXPECT_EQ(failed.state, LookupState::failed);
  EXPECT_EQ(failed.queue.limit, std::nullopt);
  EXPECT_EQ(failed.fetched_ms, 0);
}

TEST(LearntLimits, ARetryKeepsPendingAndAsksAgainSoon) {
  LearntLimits limits(settings());
  limits.lookup("/", "orders", 0);
  limits.take_wanted(10, 0);
  limits.record_retry(kOrders, 10);
  EXPECT_EQ(limits.lookup("/", "orders", 11).state, LookupState::pending);
  EXPECT_TRUE(limits.take_wanted(10, 11).empty());
  limits.lookup("/", "orders", 10 + kRetry);
  EXPECT_EQ(limits.take_wanted(10, 10 + kRetry), keys({kOrders}));
}

TEST(LearntLimits, TakesAtMostMaxOldestWishFirst) {
  LearntLimits limits(settings());
  for (const char* queue : {"a", "b", "c"}) limits.lookup("/", queue, 0);
  EXPECT_EQ(limits.take_wanted(2, 0), keys({{"/", "a"}, {"/", "b"}}));
  EXPECT_EQ(limits.take_wanted(2, 0), keys({{"/", "c"}}));
}

TEST(LearntLimits, TheOldestIsForgottenPastTheBound) {
  LearntLimits limits(settings(2));
  limits.lookup("/", "a", 0);
  limits.lookup("/", "b", 0);
  limits.lookup("/", "c", 0);
  EXPECT_EQ(limits.size(), 2u);
  EXPECT_EQ(limits.forgotten(), 1u);
  EXPECT_EQ(limits.take_wanted(10, 0), keys({{"/", "b"}, {"/", "c"}}));  // a's wish is dropped
  // An answer for a forgotten queue is dropped too.
  EXPECT_FALSE(limits.record({"/", "a"}, kFive, 1).changed);
  EXPECT_EQ(limits.size(), 2u);
  std::vector<LearntLimitRow> rows = limits.rows(10);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].key.queue, "b");
  EXPECT_EQ(limits.rows(1).size(), 1u);
}

TEST(LearntLimits, WishesOfForgottenQueuesStayBounded) {
  LearntLimits limits(settings(3));
  for (int i = 0; i < 1000; ++i) limits.lookup("/", "q" + std::to_string(i), 0);
  EXPECT_EQ(limits.forgotten(), 997u);
  EXPECT_EQ(limits.take_wanted(100, 0).size(), 3u);
}

TEST(LearntLimits, OffWithoutARefreshInterval) {
  LearntLimits limits(LearntLimitsSettings{100, milliseconds(0)});
  EXPECT_FALSE(limits.enabled());
  EXPECT_EQ(limits.lookup("/", "orders", 0).state, LookupState::unknown);
  EXPECT_EQ(limits.size(), 0u);
  EXPECT_TRUE(limits.take_wanted(10, 0).empty());
}

TEST(LearntLimits, TheRetryIsNeverLaterThanTheRefresh) {
  LearntLimits limits(LearntLimitsSettings{100, milliseconds(1000), milliseconds(5000)});
  EXPECT_EQ(limits.settings().retry_failed, milliseconds(1000));
}

TEST(LearntLimits, SharedByThreads) {
  LearntLimits limits(settings(50));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&limits, t] {
      for (int i = 0; i < 2000; ++i) {
        const std::string queue = "q" + std::to_string((i + t) % 80);
        limits.lookup("/", queue, i);
        for (const QueueKey& key : limits.take_wanted(4, i)) limits.record(key, kFive, i);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_LE(limits.size(), 50u);
  EXPECT_LE(limits.known(), 50u);
}

}  // namespace
}  // namespace nackguard::retry
