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
  rate.min_messages = 20;
  return rate;
}

// `n` first deliveries: messages not seen before.
void deliver(QueueHealth& health, std::string_view queue, int n, std::int64_t now_ms) {
  for (int i = 0; i < n; ++i) health.on_delivery(queue, limits(), now_ms);
}

// Returns of `n` distinct messages, hashed from `first` on.
void give_back(QueueHealth& health, std::string_view queue, int n, std::int64_t now_ms,
               std::uint64_t first = 1) {
  for (int i = 0; i < n; ++i) health.on_return(queue, limits(), now_ms, first + i);
}

// `delivered` first deliveries, then the returns of `returned` of them (give_back), at `now_ms`.
void deliver_and_give_back(QueueHealth& health, std::string_view queue, int delivered, int returned,
                           std::int64_t now_ms) {
  deliver(health, queue, delivered, now_ms);
  give_back(health, queue, returned, now_ms);
}

// The window's distinct messages and returns, the outage state and whether it flipped.
void expect_health(const HealthChange& got, std::uint64_t messages, std::uint64_t returned,
                   bool outage, bool changed) {
  EXPECT_EQ(got.messages, messages);
  EXPECT_EQ(got.returned, returned);
  EXPECT_EQ(got.outage, outage);
  EXPECT_EQ(got.changed, changed);
}

TEST(QueueHealth, EntersOutageAboveTheRatio) {
  QueueHealth health;
  deliver_and_give_back(health, "q", 20, 10, kT0);
  HealthChange at_ratio = health.state("q", limits(), kT0);
  EXPECT_FALSE(at_ratio.outage);  // 10/20 is not above 0.5
  EXPECT_DOUBLE_EQ(at_ratio.ratio, 0.5);
  EXPECT_EQ(at_ratio.messages, 20u);
  EXPECT_EQ(at_ratio.returned, 10u);

  const HealthChange above = health.on_return("q", limits(), kT0, 11);
  EXPECT_TRUE(above.outage);
  EXPECT_TRUE(above.changed);
  EXPECT_TRUE(above.holds_counts());
  EXPECT_DOUBLE_EQ(above.ratio, 11.0 / 20.0);

  const HealthChange still = health.on_return("q", limits(), kT0, 12);
  EXPECT_TRUE(still.outage);
  EXPECT_FALSE(still.changed);
  EXPECT_EQ(health.queues_in_outage(), std::vector<std::string>{"q"});
}

// The defect of issue 12: one poison message requeued at once reached the minimum by itself.
TEST(QueueHealth, OneMessageReturnedAgainAndAgainCountsOnce) {
  QueueHealth health;
  deliver(health, "q", 3, kT0);  // two good messages and the poison (hash 7)
  for (int i = 0; i < 1000; ++i) {
    const HealthChange back = health.on_return("q", limits(), kT0, 7);
    EXPECT_FALSE(back.outage);
    const HealthChange again = health.on_delivery("q", limits(), kT0, 7);
    EXPECT_FALSE(again.outage);
  }
  const HealthChange now = health.state("q", limits(), kT0);
  EXPECT_EQ(now.messages, 3u);
  EXPECT_EQ(now.returned, 1u);
  EXPECT_DOUBLE_EQ(now.ratio, 1.0 / 3.0);
  EXPECT_EQ(health.stats().messages, 1u);  // one hash held, once
}

TEST(QueueHealth, RedeliveriesOfMessagesNotSeenCountAsMessages) {
  QueueHealth health;
  // Redeliveries from before the window (or of another consumer's returns): each distinct
  // message counts once, however often it comes.
  for (std::uint64_t hash = 1; hash <= 20; ++hash) {
    health.on_delivery("q", limits(), kT0, hash);
    health.on_delivery("q", limits(), kT0, hash);
  }
  give_back(health, "q", 11, kT0);
  const HealthChange now = health.state("q", limits(), kT0);
  EXPECT_EQ(now.messages, 20u);
  EXPECT_EQ(now.returned, 11u);
  EXPECT_TRUE(now.outage);
}

TEST(QueueHealth, NoOutageBelowMinMessages) {
  QueueHealth health;
  for (std::uint64_t i = 1; i < 20; ++i) {
    EXPECT_FALSE(health.on_delivery("q", limits(), kT0).outage);
    const HealthChange change = health.on_return("q", limits(), kT0, i);
    EXPECT_FALSE(change.outage);
    EXPECT_FALSE(change.changed);
  }
  // The 20th message reaches the minimum with a ratio of 19/20.
  const HealthChange change = health.on_delivery("q", limits(), kT0);
  EXPECT_TRUE(change.outage);
  EXPECT_TRUE(change.changed);
  EXPECT_EQ(change.messages, 20u);
  EXPECT_EQ(change.returned, 19u);
}

TEST(QueueHealth, LeavesOnlyWellBelowTheRatio) {
  QueueHealth health;
  deliver_and_give_back(health, "q", 20, 11, kT0);
  ASSERT_TRUE(health.state("q", limits(), kT0).outage);

  // 11/22 = 0.5 is at the threshold: an outage that started stays (hysteresis) until the
  // ratio falls to 0.8 * 0.5 = 0.4.
  deliver(health, "q", 2, kT0 + 100);
  EXPECT_TRUE(health.state("q", limits(), kT0 + 100).outage);
  deliver(health, "q", 5, kT0 + 100);  // 11/27 = 0.407
  EXPECT_TRUE(health.state("q", limits(), kT0 + 100).outage);
  const HealthChange below = health.on_delivery("q", limits(), kT0 + 100);  // 11/28 = 0.393
  EXPECT_FALSE(below.outage);
  EXPECT_TRUE(below.changed);
  const HealthChange after = health.on_delivery("q", limits(), kT0 + 100);
  EXPECT_FALSE(after.outage);
  EXPECT_FALSE(after.changed);
  EXPECT_TRUE(health.queues_in_outage().empty());
}

TEST(QueueHealth, RatioHoveringAtTheThresholdDoesNotFlap) {
  QueueHealth health;
  deliver_and_give_back(health, "q", 20, 11, kT0);
  ASSERT_TRUE(health.state("q", limits(), kT0).outage);
  int flips = 0;
  std::uint64_t next = 100;
  // Each round two messages delivered, then one returned: the ratio falls to exactly 0.5 and
  // rises above it again, round after round.
  for (int round = 0; round < 100; ++round) {
    flips += health.on_delivery("q", limits(), kT0 + round).changed ? 1 : 0;
    const HealthChange at = health.on_delivery("q", limits(), kT0 + round);
    EXPECT_DOUBLE_EQ(at.ratio, 0.5);
    flips += at.changed ? 1 : 0;
    flips += health.on_return("q", limits(), kT0 + round, next++).changed ? 1 : 0;
  }
  EXPECT_EQ(flips, 0);
  EXPECT_TRUE(health.state("q", limits(), kT0 + 100).outage);
}

TEST(QueueHealth, OutageLeavesWhenFewerThanHalfTheMinimumRemain) {
  QueueHealth health;
  deliver_and_give_back(health, "q", 20, 20, kT0);
  ASSERT_TRUE(health.state("q", limits(), kT0).outage);
  // 5 s later the kT0 buckets are still in; at kT0 + 10 s they are gone, 9 new messages
  // remain, all returned: fewer than half of min_messages.
  deliver(health, "q", 9, kT0 + 5'000);
  give_back(health, "q", 9, kT0 + 5'000, 100);
  EXPECT_TRUE(health.state("q", limits(), kT0 + 9'999).outage);
  const HealthChange slid = health.state("q", limits(), kT0 + 10'000);
  expect_health(slid, 9, 9, false, true);
}

TEST(QueueHealth, WindowSlidesPastOldBuckets) {
  QueueHealth health;
  deliver_and_give_back(health, "q", 20, 15, kT0);
  ASSERT_TRUE(health.on_delivery("q", limits(), kT0).outage);

  // The bucket of kT0 counts for 20 buckets: up to kT0 + 9999 ms.
  const HealthChange last_moment = health.state("q", limits(), kT0 + 9'999);
  EXPECT_TRUE(last_moment.outage);
  EXPECT_FALSE(last_moment.changed);
  EXPECT_EQ(last_moment.messages, 21u);

  const HealthChange slid = health.state("q", limits(), kT0 + 10'000);
  expect_health(slid, 0, 0, false, true);
  EXPECT_EQ(health.stats().messages, 0u);  // the hashes went with their buckets
}

// The crash path reads state() and reports nothing itself: a flip state() shows must still be
// reported, by the next event.
TEST(QueueHealth, StateChangesNothingSoTheNextEventReportsTheFlip) {
  QueueHealth health;
  deliver(health, "q", 20, kT0);
  deliver(health, "q", 20, kT0 + 5'000);
  give_back(health, "q", 20, kT0 + 5'000);
  EXPECT_FALSE(health.state("q", limits(), kT0 + 5'000).outage);  // 20/40
  // The good messages of kT0 slide out of the window: 20/20.
  const HealthChange shown = health.state("q", limits(), kT0 + 10'000);
  EXPECT_TRUE(shown.outage);
  EXPECT_TRUE(shown.changed);
  EXPECT_TRUE(health.state("q", limits(), kT0 + 10'000).changed);  // still not consumed
  EXPECT_TRUE(health.queues_in_outage().empty());
  const HealthChange started = health.on_delivery("q", limits(), kT0 + 10'000);
  EXPECT_TRUE(started.outage);
  EXPECT_TRUE(started.changed);  // the outage start line is not lost
  EXPECT_EQ(health.queues_in_outage(), std::vector<std::string>{"q"});

  const HealthChange end_shown = health.state("q", limits(), kT0 + 15'000);
  EXPECT_FALSE(end_shown.outage);
  EXPECT_TRUE(end_shown.changed);
  const HealthChange ended = health.on_return("q", limits(), kT0 + 15'000, 99);
  EXPECT_FALSE(ended.outage);
  EXPECT_TRUE(ended.changed);  // the outage end line is not lost
}

TEST(QueueHealth, AfterMaxOutageReturnsCountAgain) {
  QueueHealth health;
  RateLimits rate = limits();
  rate.max_outage = Millis(60'000);
  std::uint64_t next = 1;
  int became_overdue = 0;
  // Every second, 5 new messages, all returned: the outage lasts.
  auto second = [&](std::int64_t s) {
    const std::int64_t t = kT0 + s * 1000;
    for (int i = 0; i < 5; ++i) {
      became_overdue += health.on_delivery("q", rate, t).became_overdue ? 1 : 0;
      became_overdue += health.on_return("q", rate, t, next++).became_overdue ? 1 : 0;
    }
    return health.state("q", rate, t);
  };
  for (std::int64_t s = 0; s < 3; ++s) EXPECT_FALSE(second(s).outage);
  // The 20th message, at 3 s, starts it.
  const HealthChange start = second(3);
  ASSERT_TRUE(start.outage);
  ASSERT_TRUE(start.holds_counts());
  for (std::int64_t s = 4; s < 63; ++s) {
    const HealthChange change = second(s);
    EXPECT_TRUE(change.holds_counts()) << "at " << s << " s";
  }
  EXPECT_EQ(became_overdue, 0);
  const HealthChange overdue = second(63);
  EXPECT_TRUE(overdue.outage);  // still an outage for the logs and the metric...
  EXPECT_TRUE(overdue.overdue);
  EXPECT_FALSE(overdue.holds_counts());  // ...but returns count again
  EXPECT_EQ(overdue.outage_ms, 60'000);
  EXPECT_EQ(became_overdue, 1);
  for (std::int64_t s = 64; s < 70; ++s) EXPECT_TRUE(second(s).overdue);
  EXPECT_EQ(became_overdue, 1);  // told once
  EXPECT_EQ(health.stats().max_outage_reached, 1u);

  // An outage that ends and starts again gets its full max_outage again.
  EXPECT_FALSE(health.on_delivery("q", rate, kT0 + 100'000).outage);
  for (std::int64_t s = 101; s < 105; ++s) second(s);
  const HealthChange again = health.state("q", rate, kT0 + 105'000);
  EXPECT_TRUE(again.outage);
  EXPECT_FALSE(again.overdue);
}

TEST(QueueHealth, MessageHashesStayWithinTheirBound) {
  QueueHealth health(10, 5);
  deliver_and_give_back(health, "q", 20, 8, kT0);
  HealthStats stats = health.stats();
  EXPECT_EQ(stats.messages, 5u);
  EXPECT_EQ(stats.messages_dropped, 3u);
  // Past the bound a message counts as if it was new: the count stays usable.
  EXPECT_EQ(health.state("q", limits(), kT0).returned, 8u);
  // Once the window slid past them, the hashes of a quiet queue make room for another's.
  give_back(health, "other", 5, kT0 + 10'000);
  stats = health.stats();
  EXPECT_EQ(stats.messages, 5u);
  EXPECT_EQ(stats.messages_dropped, 3u);
  EXPECT_EQ(health.state("other", limits(), kT0 + 10'000).returned, 5u);
}

TEST(QueueHealth, AForgottenQueueFreesItsHashes) {
  QueueHealth health(1);
  give_back(health, "a", 5, kT0);
  EXPECT_EQ(health.stats().messages, 5u);
  give_back(health, "b", 2, kT0);
  EXPECT_EQ(health.stats().messages, 2u);
  EXPECT_EQ(health.stats().queues, 1u);
}

TEST(QueueHealth, PartlySlidWindowDropsOnlyOldBuckets) {
  QueueHealth health;
  deliver(health, "q", 10, kT0);
  deliver(health, "q", 10, kT0 + 5'000);
  give_back(health, "q", 11, kT0 + 5'000);
  ASSERT_TRUE(health.on_delivery("q", limits(), kT0 + 5'000).outage);

  const HealthChange after = health.on_delivery("q", limits(), kT0 + 10'000);
  // The 10 of kT0 are gone: 12 messages, at least half the minimum, and 11/12 returned.
  expect_health(after, 12, 11, true, false);

  // Long after, a ring slot that comes round again starts from zero.
  const HealthChange much_later = health.on_delivery("q", limits(), kT0 + 5'000 + 10 * 10'000);
  expect_health(much_later, 1, 0, false, true);
}

TEST(QueueHealth, QueuesAreIndependent) {
  QueueHealth health;
  deliver_and_give_back(health, "a", 20, 20, kT0);
  deliver(health, "b", 20, kT0);
  EXPECT_TRUE(health.on_delivery("a", limits(), kT0).outage);
  EXPECT_FALSE(health.on_delivery("b", limits(), kT0).outage);
  deliver_and_give_back(health, "c", 20, 20, kT0);
  EXPECT_EQ(health.queues_in_outage(), (std::vector<std::string>{"a", "c"}));
}

TEST(QueueHealth, UnknownQueueIsHealthyAndNotTracked) {
  QueueHealth health(1);
  deliver(health, "a", 20, kT0);
  const HealthChange unknown = health.state("never-seen", limits(), kT0);
  EXPECT_FALSE(unknown.outage);
  EXPECT_FALSE(unknown.changed);
  EXPECT_EQ(health.state("a", limits(), kT0).messages, 20u);  // "a" was not forgotten
}

TEST(QueueHealth, ForgetsTheLeastRecentlySeenQueueBeyondMax) {
  QueueHealth health(2);
  deliver(health, "a", 5, kT0);
  deliver(health, "b", 5, kT0);
  deliver(health, "a", 1, kT0);  // now b is the least recently seen
  deliver(health, "c", 1, kT0);  // b goes
  EXPECT_EQ(health.state("a", limits(), kT0).messages, 6u);
  EXPECT_EQ(health.state("b", limits(), kT0).messages, 0u);
  EXPECT_EQ(health.state("c", limits(), kT0).messages, 1u);
  // Reading state() does not count as seeing a queue: a is older than c, so b's return
  // (from zero) makes a go.
  deliver(health, "b", 1, kT0);
  EXPECT_EQ(health.state("b", limits(), kT0).messages, 1u);
  EXPECT_EQ(health.state("a", limits(), kT0).messages, 0u);
  EXPECT_EQ(health.state("c", limits(), kT0).messages, 1u);
}

TEST(QueueHealth, NewWindowLengthStartsOver) {
  QueueHealth health;
  deliver_and_give_back(health, "q", 20, 20, kT0);
  RateLimits longer = limits();
  longer.window = Millis(60'000);
  const HealthChange change = health.on_delivery("q", longer, kT0);
  EXPECT_EQ(change.messages, 1u);
  EXPECT_FALSE(change.outage);
  EXPECT_TRUE(change.changed);
  EXPECT_EQ(health.stats().messages, 0u);
}

TEST(QueueHealth, ConcurrentEventsAreAllCounted) {
  QueueHealth health;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&health, t] {
      const std::string own = "own-" + std::to_string(t);
      for (int i = 0; i < 10'000; ++i) {
        health.on_delivery("shared", limits(), kT0);
        if (i % 4 == 0) health.on_return("shared", limits(), kT0, t * 100'000 + i);
        health.on_delivery(own, limits(), kT0);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  const HealthChange shared = health.state("shared", limits(), kT0);
  EXPECT_EQ(shared.messages, 40'000u);
  EXPECT_EQ(shared.returned, 10'000u);
  EXPECT_FALSE(shared.outage);
  for (int t = 0; t < 4; ++t) {
    EXPECT_EQ(health.state("own-" + std::to_string(t), limits(), kT0).messages, 10'000u);
  }
}

}  // namespace
}  // namespace nackguard::retry
