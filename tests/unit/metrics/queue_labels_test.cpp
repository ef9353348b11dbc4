#include "proxy/metrics/queue_labels.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <barrier>
#include <memory>
#include <thread>
#include <vector>

namespace nackguard::metrics {
namespace {

TEST(QueueLabels, GivesEachQueueItsIndexUpToTheCap) {
  QueueLabels labels(2);
  EXPECT_EQ(labels.index("b"), 0u);
  EXPECT_EQ(labels.index("a"), 1u);
  EXPECT_EQ(labels.index("b"), 0u);
  EXPECT_EQ(labels.index("c"), labels.other_index());
  EXPECT_EQ(labels.index("a"), 1u);
  EXPECT_EQ(labels.index("d"), labels.other_index());
  EXPECT_EQ(labels.other_index(), 2u);
  EXPECT_EQ(labels.slots(), 3u);
}

TEST(QueueLabels, SnapshotIsSortedWithOtherLast) {
  QueueLabels labels(2);
  EXPECT_TRUE(labels.snapshot().empty());
  labels.index("zeta");
  labels.index("alpha");
  auto entries = labels.snapshot();
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].name, "alpha");
  EXPECT_EQ(entries[0].index, 1u);
  EXPECT_EQ(entries[1].name, "zeta");
  labels.index("beta");
  entries = labels.snapshot();
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[2].name, "_other");
  EXPECT_EQ(entries[2].index, 2u);
}

TEST(QueueLabels, AQueueNamedOtherSharesTheOtherIndex) {
  QueueLabels labels(5);
  EXPECT_EQ(labels.index("_other"), labels.other_index());
  labels.index("a");
  auto entries = labels.snapshot();
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[1].name, "_other");
}

TEST(QueueLabels, ZeroCapSendsEverythingToOther) {
  QueueLabels labels(0);
  EXPECT_EQ(labels.index("a"), 0u);
  EXPECT_EQ(labels.snapshot().size(), 1u);
}

TEST(QueueLabels, ConcurrentCallersAgreeAndStayWithinTheCap) {
  QueueLabels labels(50);
  std::vector<std::vector<std::size_t>> seen(4);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) seen[t].push_back(labels.index("q" + std::to_string(i)));
    });
  }
  for (auto& thread : threads) thread.join();
  for (std::size_t t = 1; t < 4; ++t) EXPECT_EQ(seen[t], seen[0]) << "thread " << t;
  EXPECT_EQ(labels.snapshot().size(), 51u);  // 50 queues and _other
}

// The last free slot taken by one caller while another has just missed the name: the other
// must still get the name's own index, not "_other" (CI once saw thread 1 get 50 for "q30").
// Each round races 4 threads on the one name of a one-slot instance.
TEST(QueueLabels, ACallerRacingTheOneFillingTheLastSlotGetsTheSameIndex) {
  constexpr int kThreads = 4;
  constexpr int kRounds = 100000;
  std::vector<std::unique_ptr<QueueLabels>> rounds;
  for (int r = 0; r < kRounds; ++r) rounds.push_back(std::make_unique<QueueLabels>(1));
  std::vector<std::vector<std::size_t>> seen(kThreads, std::vector<std::size_t>(kRounds));
  std::barrier start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        start.arrive_and_wait();
        seen[t][r] = rounds[r]->index("q");
      }
    });
  }
  for (auto& thread : threads) thread.join();
  int wrong = 0;
  for (int t = 0; t < kThreads; ++t) {
    for (int r = 0; r < kRounds; ++r) wrong += seen[t][r] != 0u;
  }
  EXPECT_EQ(wrong, 0) << "calls that got _other for the one queue with its own slot";
}

}  // namespace
}  // namespace nackguard::metrics
