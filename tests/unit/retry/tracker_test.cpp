#include "proxy/retry/tracker.hpp"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <list>
#include <map>
#include <random>
#include <string>
#include <thread>

namespace nackguard::retry {
namespace {

using std::chrono::hours;
using std::chrono::milliseconds;

constexpr std::int64_t kT0 = 1'700'000'000'000;  // a wall-clock time in ms

TrackerKey key(std::uint64_t i) {
  return make_key("orders", "msg-" + std::to_string(i));
}

void count_return(TrackerEntry& entry) {
  ++entry.returns;
}

// The tracker's entries, and how many it evicted and expired.
void expect_stats(const Tracker& tracker, std::size_t entries, std::uint64_t evictions,
                  std::uint64_t expiries) {
  const TrackerStats stats = tracker.stats();
  EXPECT_EQ(stats.entries, entries);
  EXPECT_EQ(stats.evictions, evictions);
  EXPECT_EQ(stats.expiries, expiries);
}

TEST(MakeKey, IsXxh3Over128BitsOfQueueNulIdentity) {
  const std::string joined("orders\0abc", 10);
  const XXH128_hash_t expected = XXH3_128bits(joined.data(), joined.size());
  const TrackerKey actual = make_key("orders", "abc");
  EXPECT_EQ(actual.high, expected.high64);
  EXPECT_EQ(actual.low, expected.low64);
}

TEST(MakeKey, SeparatesQueueFromIdentity) {
  EXPECT_EQ(make_key("q", "id"), make_key("q", "id"));
  EXPECT_FALSE(make_key("ab", "c") == make_key("a", "bc"));
  EXPECT_FALSE(make_key("q1", "id") == make_key("q2", "id"));
  EXPECT_FALSE(make_key("q", "") == make_key("", "q"));
}

TEST(MakeKey, LongIdentities) {
  const std::string body(100'000, 'x');
  const std::string joined = std::string("q") + '\0' + body;
  const XXH128_hash_t expected = XXH3_128bits(joined.data(), joined.size());
  const TrackerKey actual = make_key("q", body);
  EXPECT_EQ(actual.high, expected.high64);
  EXPECT_EQ(actual.low, expected.low64);
}

TEST(Tracker, UpsertFindErase) {
  Tracker tracker(100, hours(1));
  EXPECT_FALSE(tracker.find(key(1), kT0).has_value());

  EXPECT_EQ(tracker.upsert(key(1), kT0, count_return).returns, 1u);
  EXPECT_EQ(tracker.upsert(key(1), kT0, count_return).returns, 2u);
  EXPECT_EQ(tracker.upsert(key(2), kT0, count_return).returns, 1u);
  ASSERT_TRUE(tracker.find(key(1), kT0).has_value());
  EXPECT_EQ(tracker.find(key(1), kT0)->returns, 2u);
  EXPECT_EQ(tracker.stats().entries, 2u);

  tracker.erase(key(1));
  EXPECT_FALSE(tracker.find(key(1), kT0).has_value());
  EXPECT_EQ(tracker.find(key(2), kT0)->returns, 1u);
  EXPECT_EQ(tracker.stats().entries, 1u);
  tracker.erase(key(1));  // erasing an absent key is harmless
  EXPECT_EQ(tracker.upsert(key(1), kT0, count_return).returns, 1u);  // starts from zero again

  expect_stats(tracker, 2, 0, 0);
}

TEST(Tracker, UpsertReturnsCopyAfterUpdate) {
  Tracker tracker(10, hours(1));
  const TrackerEntry copy = tracker.upsert(key(1), kT0, [](TrackerEntry& entry) {
    entry.returns = 7;
    entry.pending_action = Action::delay;
    entry.pending_delay_ms = 2000;
  });
  EXPECT_EQ(copy.returns, 7u);
  EXPECT_EQ(copy.pending_delay_ms, 2000u);
  const auto found = tracker.find(key(1), kT0);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->returns, 7u);
  EXPECT_EQ(found->pending_action, Action::delay);
  EXPECT_EQ(found->pending_delay_ms, 2000u);
}

TEST(Tracker, EvictsLeastRecentlyUpsertedAndFindDoesNotRefresh) {
  Tracker tracker(3, hours(1), 1);
  tracker.upsert(key(1), kT0, count_return);
  tracker.upsert(key(2), kT0 + 1, count_return);
  tracker.upsert(key(3), kT0 + 2, count_return);
  ASSERT_TRUE(tracker.find(key(1), kT0 + 3));  // a find does not make 1 recent

  tracker.upsert(key(4), kT0 + 4, count_return);  // full: 1 goes
  EXPECT_FALSE(tracker.find(key(1), kT0 + 5));
  EXPECT_TRUE(tracker.find(key(2), kT0 + 5));
  EXPECT_EQ(tracker.stats().evictions, 1u);

  tracker.upsert(key(2), kT0 + 6, count_return);  // an upsert does: now 3 is the oldest
  tracker.upsert(key(5), kT0 + 7, count_return);
  EXPECT_FALSE(tracker.find(key(3), kT0 + 8));
  EXPECT_TRUE(tracker.find(key(2), kT0 + 8));
  EXPECT_TRUE(tracker.find(key(4), kT0 + 8));
  EXPECT_TRUE(tracker.find(key(5), kT0 + 8));
  EXPECT_EQ(tracker.find(key(2), kT0 + 8)->returns, 2u);

  expect_stats(tracker, 3, 2, 0);
}

TEST(Tracker, IdleEntriesExpire) {
  Tracker tracker(10, milliseconds(1000), 1);
  tracker.upsert(key(1), kT0, count_return);
  EXPECT_TRUE(tracker.find(key(1), kT0 + 900));
  EXPECT_TRUE(tracker.find(key(1), kT0 + 1000));   // exactly idle_ttl old: still there
  EXPECT_FALSE(tracker.find(key(1), kT0 + 1001));  // a find did not refresh it
  EXPECT_EQ(tracker.stats().expiries, 1u);
  EXPECT_EQ(tracker.stats().entries, 0u);

  // An expired entry is absent to upsert too: the count starts over.
  tracker.upsert(key(2), kT0, count_return);
  tracker.upsert(key(2), kT0 + 500, count_return);
  EXPECT_EQ(tracker.upsert(key(2), kT0 + 1400, count_return).returns, 3u);
  EXPECT_EQ(tracker.upsert(key(2), kT0 + 2401, count_return).returns, 1u);
  EXPECT_EQ(tracker.stats().expiries, 2u);
  EXPECT_EQ(tracker.stats().evictions, 0u);
}

TEST(Tracker, ExpiredTailIsDroppedOpportunistically) {
  Tracker tracker(10, milliseconds(1000), 1);
  tracker.upsert(key(1), kT0, count_return);
  tracker.upsert(key(2), kT0 + 10, count_return);
  tracker.upsert(key(3), kT0 + 900, count_return);
  tracker.upsert(key(4), kT0 + 1500, count_return);  // 1 and 2 are idle past the ttl
  TrackerStats stats = tracker.stats();
  EXPECT_EQ(stats.entries, 2u);
  EXPECT_EQ(stats.expiries, 2u);
  EXPECT_TRUE(tracker.find(key(3), kT0 + 1500));
}

TEST(Tracker, ExpiredTailIsAnExpiryNotAnEviction) {
  Tracker tracker(2, milliseconds(1000), 1);
  tracker.upsert(key(1), kT0, count_return);
  tracker.upsert(key(2), kT0 + 600, count_return);
  tracker.upsert(key(3), kT0 + 1200, count_return);  // full, but 1 expired: no eviction
  expect_stats(tracker, 2, 0, 1);
}

TEST(Tracker, ZeroTtlNeverExpires) {
  Tracker tracker(10, milliseconds(0), 1);
  tracker.upsert(key(1), kT0, count_return);
  EXPECT_TRUE(tracker.find(key(1), kT0 + 365LL * 24 * 3600 * 1000));
}

TEST(Tracker, MillionIdentitiesKeepExactlyMaxEntries) {
  Tracker tracker(100'000, hours(1));
  for (std::uint64_t i = 0; i < 1'000'000; ++i) tracker.upsert(key(i), kT0, count_return);
  expect_stats(tracker, 100'000, 900'000, 0);
  // The most recent survive, the oldest are gone.
  for (std::uint64_t i = 999'000; i < 1'000'000; ++i) ASSERT_TRUE(tracker.find(key(i), kT0)) << i;
  for (std::uint64_t i = 0; i < 1000; ++i) ASSERT_FALSE(tracker.find(key(i), kT0)) << i;
}

TEST(Tracker, ShardCapacitiesSumToMaxEntries) {
  for (const std::size_t max_entries : {1u, 7u, 15u, 16u, 17u, 1000u, 100'003u}) {
    Tracker tracker(max_entries, hours(1), 16);
    EXPECT_EQ(tracker.max_entries(), max_entries);
    for (std::uint64_t i = 0; i < 3 * max_entries + 2000; ++i) {
      tracker.upsert(key(i), kT0, count_return);
    }
    EXPECT_EQ(tracker.stats().entries, max_entries) << "max_entries " << max_entries;
  }
}

TEST(Tracker, ZeroCapacityKeepsNothing) {
  Tracker tracker(0, hours(1));
  EXPECT_EQ(tracker.upsert(key(1), kT0, count_return).returns, 1u);
  EXPECT_EQ(tracker.upsert(key(1), kT0, count_return).returns, 1u);
  EXPECT_FALSE(tracker.find(key(1), kT0));
  EXPECT_EQ(tracker.stats().entries, 0u);
}

// Random operations against a plain list-and-map LRU: exercises the hash table's
// backward-shift deletion and the node free list.
TEST(Tracker, MatchesReferenceLruUnderRandomOperations) {
  constexpr std::size_t kCapacity = 64;
  Tracker tracker(kCapacity, hours(1), 1);
  std::list<std::uint64_t> recency;  // front = most recent
  std::map<std::uint64_t, std::pair<std::uint32_t, std::list<std::uint64_t>::iterator>> model;
  std::uint64_t evictions = 0;
  std::mt19937_64 rng(11);
  for (int step = 0; step < 200'000; ++step) {
    const std::uint64_t id = rng() % 200;
    const auto op = rng() % 10;
    auto it = model.find(id);
    if (op < 6) {
      const std::uint32_t got = tracker.upsert(key(id), kT0, count_return).returns;
      if (it == model.end()) {
        if (model.size() == kCapacity) {
          model.erase(recency.back());
          recency.pop_back();
          ++evictions;
        }
        recency.push_front(id);
        it = model.emplace(id, std::make_pair(0u, recency.begin())).first;
      } else {
        recency.splice(recency.begin(), recency, it->second.second);
      }
      ASSERT_EQ(got, ++it->second.first) << "step " << step;
    } else if (op < 9) {
      const auto found = tracker.find(key(id), kT0);
      ASSERT_EQ(found.has_value(), it != model.end()) << "step " << step;
      if (found) {
        ASSERT_EQ(found->returns, it->second.first) << "step " << step;
      }
    } else {
      tracker.erase(key(id));
      if (it != model.end()) {
        recency.erase(it->second.second);
        model.erase(it);
      }
    }
  }
  EXPECT_EQ(tracker.stats().entries, model.size());
  EXPECT_EQ(tracker.stats().evictions, evictions);
}

TEST(Tracker, ConcurrentUpsertsHoldTheBound) {
  static constexpr std::size_t kMax = 50'000;
  constexpr std::uint64_t kThreads = 4;
  constexpr std::uint64_t kPerThread = 100'000;
  constexpr std::uint64_t kHotEvery = 100;
  Tracker tracker(kMax, hours(1));
  const TrackerKey hot = make_key("orders", "hot");
  std::vector<std::thread> threads;
  for (std::uint64_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&tracker, &hot, t] {
      for (std::uint64_t i = 0; i < kPerThread; ++i) {
        tracker.upsert(key(t * 10'000'000 + i), kT0 + static_cast<std::int64_t>(i), count_return);
        if (i % kHotEvery == 0) {
          tracker.upsert(hot, kT0 + static_cast<std::int64_t>(i), count_return);
          tracker.find(key(t * 10'000'000 + i / 2), kT0 + static_cast<std::int64_t>(i));
        }
        if (i % 1000 == 0) {
          ASSERT_LE(tracker.stats().entries, kMax);
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  const TrackerStats stats = tracker.stats();
  EXPECT_EQ(stats.entries, kMax);
  EXPECT_EQ(stats.evictions + stats.entries, kThreads * kPerThread + 1);  // +1: the hot key
  // Every increment of the hot key happened under its shard's lock.
  ASSERT_TRUE(tracker.find(hot, kT0 + 1'000'000));
  EXPECT_EQ(tracker.find(hot, kT0 + 1'000'000)->returns, kThreads * kPerThread / kHotEvery);
}

}  // namespace
}  // namespace nackguard::retry
