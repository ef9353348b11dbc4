#include "proxy/retry/health.hpp"

#include <gtest/gtest.h>

#include <thread>

namespace nackguard::retry {
namespace {

constexpr std::int64_t kT0 = 1'700'000'000'000;  // a multiple of the 500 ms bucket

RateLimits limits() {
  RateLimits rate;
  rate.window = Millis(10'000);  // 20 buckets of 500 ms
  rate.outage_ratio = 0.5;
  rate.min_deliveries = 20;
  return rate;
}

void deliver(QueueHealth& health, std::string_view queue, int n, std::int64_t now_ms) {
  for (int i = 0; i < n; ++i) health.on_delivery(queue, limits(), now_ms);
}

void give_back(QueueHealth& health, std::string_view queue, int n, std::int64_t now_ms) {
  for (int i = 0; i < n; ++i) health.on_return(queue, limits(), now_ms);
}

TEST(QueueHealth, EntersOutageAboveTheRatio) {
  QueueHealth health;
  deliver(health, "q", 20, kT0);
  give_back(health, "q", 10, kT0);
  HealthChange at_ratio = health.state("q", limits(), kT0);
  EXPECT_FALSE(at_ratio.outage);  // 10/20 is not above 0.5
  EXPECT_DOUBLE_EQ(at_ratio.ratio, 0.5);
  EXPECT_EQ(at_ratio.deliveries, 20u);
  EXPECT_EQ(at_ratio.returns, 10u);

  const HealthChange above = health.on_return("q", limits(), kT0);
  EXPECT_TRUE(above.outage);
  EXPECT_TRUE(above.changed);
  EXPECT_DOUBLE_EQ(above.ratio, 11.0 / 20.0);

  const HealthChange still = health.on_return("q", limits(), kT0);
  EXPECT_TRUE(still.outage);
  EXPECT_FALSE(still.changed);
  EXPECT_EQ(health.queues_in_outage(), std::vector<std::string>{"q"});
}

TEST(QueueHealth, NoOutageBelowMinDeliveries) {
  QueueHealth health;
  for (int i = 0; i < 19; ++i) {
    EXPECT_FALSE(health.on_delivery("q", limits(), kT0).outage);
    const HealthChange change = health.on_return("q", limits(), kT0);
    EXPECT_FALSE(change.outage);
    EXPECT_FALSE(change.changed);
  }
  // The 20th delivery reaches the minimum with a ratio of 19/20.
  const HealthChange change = health.on_delivery("q", limits(), kT0);
  EXPECT_TRUE(change.outage);
  EXPECT_TRUE(change.changed);
  EXPECT_EQ(change.deliveries, 20u);
  EXPECT_EQ(change.returns, 19u);
}

TEST(QueueHealth, LeavesWhenTheRatioFalls) {
  QueueHealth health;
  deliver(health, "q", 20, kT0);
  give_back(health, "q", 11, kT0);
  ASSERT_TRUE(health.state("q", limits(), kT0).outage);

  const HealthChange first = health.on_delivery("q", limits(), kT0 + 100);  // 11/21
  EXPECT_TRUE(first.outage);
  EXPECT_FALSE(first.changed);
  const HealthChange second = health.on_delivery("q", limits(), kT0 + 100);  // 11/22 = 0.5
  EXPECT_FALSE(second.outage);
  EXPECT_TRUE(second.changed);
  const HealthChange third = health.on_delivery("q", limits(), kT0 + 100);
  EXPECT_FALSE(third.outage);
  EXPECT_FALSE(third.changed);
  EXPECT_TRUE(health.queues_in_outage().empty());
}

TEST(QueueHealth, WindowSlidesPastOldBuckets) {
  QueueHealth health;
  deliver(health, "q", 20, kT0);
  give_back(health, "q", 15, kT0);
  ASSERT_TRUE(health.state("q", limits(), kT0).outage);

  // The bucket of kT0 counts for 20 buckets: up to kT0 + 9999 ms.
  const HealthChange last_moment = health.state("q", limits(), kT0 + 9'999);
  EXPECT_TRUE(last_moment.outage);
  EXPECT_FALSE(last_moment.changed);
  EXPECT_EQ(last_moment.deliveries, 20u);

  const HealthChange slid = health.state("q", limits(), kT0 + 10'000);
  EXPECT_FALSE(slid.outage);
  EXPECT_TRUE(slid.changed);
  EXPECT_EQ(slid.deliveries, 0u);
  EXPECT_EQ(slid.returns, 0u);
  EXPECT_FALSE(health.state("q", limits(), kT0 + 10'000).changed);
}

TEST(QueueHealth, PartlySlidWindowDropsOnlyOldBuckets) {
  QueueHealth health;
  deliver(health, "q", 10, kT0);
  deliver(health, "q", 10, kT0 + 5'000);
  give_back(health, "q", 11, kT0 + 5'000);
  ASSERT_TRUE(health.state("q", limits(), kT0 + 5'000).outage);

  const HealthChange after = health.on_delivery("q", limits(), kT0 + 10'000);
  EXPECT_EQ(after.deliveries, 11u);  // the 10 of kT0 are gone
  EXPECT_EQ(after.returns, 11u);
  EXPECT_FALSE(after.outage);  // 11 deliveries < min_deliveries
  EXPECT_TRUE(after.changed);

  // Long after, a ring slot that comes round again starts from zero.
  const HealthChange much_later = health.on_delivery("q", limits(), kT0 + 5'000 + 10 * 10'000);
  EXPECT_EQ(much_later.deliveries, 1u);
  EXPECT_EQ(much_later.returns, 0u);
}

TEST(QueueHealth, ChangedExactlyOnFlips) {
  QueueHealth health;
  deliver(health, "q", 20, kT0);
  int flips = 0;
  bool outage = false;
  // Alternate bursts of returns and deliveries so the ratio crosses 0.5 both ways.
  for (int round = 0; round < 5; ++round) {
    for (int i = 0; i < 40; ++i) {
      const HealthChange change = health.on_return("q", limits(), kT0 + round);
      EXPECT_EQ(change.changed, change.outage != outage);
      flips += change.changed ? 1 : 0;
      outage = change.outage;
    }
    for (int i = 0; i < 100; ++i) {
      const HealthChange change = health.on_delivery("q", limits(), kT0 + round);
      EXPECT_EQ(change.changed, change.outage != outage);
      flips += change.changed ? 1 : 0;
      outage = change.outage;
    }
  }
  EXPECT_GE(flips, 2);
  EXPECT_EQ(flips % 2, outage ? 1 : 0);
}

TEST(QueueHealth, QueuesAreIndependent) {
  QueueHealth health;
  deliver(health, "a", 20, kT0);
  give_back(health, "a", 20, kT0);
  deliver(health, "b", 20, kT0);
  EXPECT_TRUE(health.state("a", limits(), kT0).outage);
  EXPECT_FALSE(health.state("b", limits(), kT0).outage);
  deliver(health, "c", 20, kT0);
  give_back(health, "c", 20, kT0);
  EXPECT_EQ(health.queues_in_outage(), (std::vector<std::string>{"a", "c"}));
}

TEST(QueueHealth, UnknownQueueIsHealthyAndNotTracked) {
  QueueHealth health(1);
  deliver(health, "a", 20, kT0);
  const HealthChange unknown = health.state("never-seen", limits(), kT0);
  EXPECT_FALSE(unknown.outage);
  EXPECT_FALSE(unknown.changed);
  EXPECT_EQ(health.state("a", limits(), kT0).deliveries, 20u);  // "a" was not forgotten
}

TEST(QueueHealth, ForgetsTheLeastRecentlySeenQueueBeyondMax) {
  QueueHealth health(2);
  deliver(health, "a", 5, kT0);
  deliver(health, "b", 5, kT0);
  deliver(health, "a", 1, kT0);  // now b is the least recently seen
  deliver(health, "c", 1, kT0);  // b goes
  EXPECT_EQ(health.state("a", limits(), kT0).deliveries, 6u);
  EXPECT_EQ(health.state("b", limits(), kT0).deliveries, 0u);
  EXPECT_EQ(health.state("c", limits(), kT0).deliveries, 1u);
  // Reading state() does not count as seeing a queue: a is older than c, so b's return
  // (from zero) makes a go.
  deliver(health, "b", 1, kT0);
  EXPECT_EQ(health.state("b", limits(), kT0).deliveries, 1u);
  EXPECT_EQ(health.state("a", limits(), kT0).deliveries, 0u);
  EXPECT_EQ(health.state("c", limits(), kT0).deliveries, 1u);
}

TEST(QueueHealth, NewWindowLengthStartsOver) {
  QueueHealth health;
  deliver(health, "q", 20, kT0);
  give_back(health, "q", 20, kT0);
  RateLimits longer = limits();
  longer.window = Millis(60'000);
  const HealthChange change = health.on_delivery("q", longer, kT0);
  EXPECT_EQ(change.deliveries, 1u);
  EXPECT_FALSE(change.outage);
  EXPECT_TRUE(change.changed);
}

TEST(QueueHealth, ConcurrentEventsAreAllCounted) {
  QueueHealth health;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&health, t] {
      const std::string own = "own-" + std::to_string(t);
      for (int i = 0; i < 10'000; ++i) {
        health.on_delivery("shared", limits(), kT0);
        if (i % 4 == 0) health.on_return("shared", limits(), kT0);
        health.on_delivery(own, limits(), kT0);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  const HealthChange shared = health.state("shared", limits(), kT0);
  EXPECT_EQ(shared.deliveries, 40'000u);
  EXPECT_EQ(shared.returns, 10'000u);
  EXPECT_FALSE(shared.outage);
  for (int t = 0; t < 4; ++t) {
    EXPECT_EQ(health.state("own-" + std::to_string(t), limits(), kT0).deliveries, 10'000u);
  }
}

}  // namespace
}  // namespace nackguard::retry
