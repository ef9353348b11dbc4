// The per-queue window of /status: deltas against the oldest snapshot within the window.

#include "proxy/status/queue_window.hpp"

#include <gtest/gtest.h>

namespace nackguard::status {
namespace {

using std::chrono::seconds;

QueueCounts counts(const std::string& queue, std::uint64_t returns) {
  QueueCounts c;
  c.queue = queue;
  c.returns = returns;
  c.deliveries = 2 * returns;
  return c;
}

TEST(QueueWindow, SinceStartUntilTheFirstSnapshot) {
  QueueWindow window(0, seconds(60), seconds(10));
  EXPECT_EQ(window.seconds(5000), 5);
  EXPECT_EQ(window.delta(5000, counts("q", 4))->returns, 4u);
}

TEST(QueueWindow, DeltaAgainstTheOldestSnapshotInTheWindow) {
  QueueWindow window(0, seconds(60), seconds(10));
  window.observe(0, {counts("q", 1)});
  window.observe(5'000, {counts("q", 2)});  // under a step after the last: not kept
  window.observe(10'000, {counts("q", 3)});
  window.observe(40'000, {counts("q", 7)});
  EXPECT_EQ(window.seconds(50'000), 50);
  EXPECT_EQ(window.delta(50'000, counts("q", 9))->returns, 8u);
  EXPECT_EQ(window.delta(50'000, counts("q", 9))->deliveries, 16u);
  // At 65 s the snapshot at 0 is out of the window: the one at 10 s is the baseline.
  EXPECT_EQ(window.seconds(65'000), 55);
  EXPECT_EQ(window.delta(65'000, counts("q", 9))->returns, 6u);
  // A queue first seen after the baseline: all of its counts are in the window.
  EXPECT_EQ(window.delta(65'000, counts("new", 3))->returns, 3u);
}

TEST(QueueWindow, KeepsTheBusiestQueuesOnly) {
  QueueWindow window(0, seconds(60), seconds(10));
  std::vector<QueueCounts> many;
  for (std::size_t i = 0; i < kMaxWindowQueues + 5; ++i)
    many.push_back(counts("q" + std::to_string(i), i));
  window.observe(0, many);
  EXPECT_FALSE(window.delta(1000, counts("q0", 1))) << "left out: no window count";
  EXPECT_EQ(window.delta(1000, counts("q1004", 1010))->returns, 6u);
}

}  // namespace
}  // namespace nackguard::status
