// Tracker::top (the /status sample) and TrackerNames (the names behind its keys).

#include <gtest/gtest.h>

#include <string>

#include "proxy/retry/tracker.hpp"
#include "proxy/retry/tracker_names.hpp"

namespace nackguard::retry {
namespace {

using std::chrono::milliseconds;

TrackerKey key(int i) {
  return make_key("orders", "msg-" + std::to_string(i));
}

void add_returns(Tracker& tracker, int i, std::uint32_t returns, std::int64_t now) {
  tracker.upsert(key(i), now, [&](TrackerEntry& e) {
    e.returns = returns;
    e.last_return_ms = now;
  });
}

TEST(ShortId, IsTheKeysFirst12HexDigits) {
  EXPECT_EQ(short_id(TrackerKey{0x0123456789abcdefull, 7}), "0123456789ab");
  EXPECT_EQ(short_id(TrackerKey{0xf00000000000000full, 0}), "f00000000000");
  EXPECT_EQ(short_id(make_key("q", "a")).size(), 12u);
}

TEST(TrackerTop, MostReturnsFirstThenLatestReturn) {
  Tracker tracker(100, milliseconds(0), 4);
  add_returns(tracker, 1, 5, 10);
  add_returns(tracker, 2, 9, 20);
  add_returns(tracker, 3, 5, 30);
  add_returns(tracker, 4, 1, 40);
  std::size_t visited = 0;
  const auto top = tracker.top(3, 100, 50, &visited);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].key, key(2));
  EXPECT_EQ(top[1].key, key(3));  // 5 returns, the later last return
  EXPECT_EQ(top[2].key, key(1));
  EXPECT_EQ(top[0].entry.returns, 9u);
  EXPECT_EQ(visited, 4u);
}

TEST(TrackerTop, ReadsAtMostVisitPerShardOfTheMostRecent) {
  Tracker tracker(1000, milliseconds(0), 1);
  add_returns(tracker, 0, 100, 1);  // the most returns, but the least recent
  for (int i = 1; i <= 20; ++i) add_returns(tracker, i, 1, 1 + i);
  std::size_t visited = 0;
  const auto top = tracker.top(5, 10, 100, &visited);
  EXPECT_EQ(visited, 10u);
  ASSERT_EQ(top.size(), 5u);
  for (const auto& sampled : top) EXPECT_EQ(sampled.entry.returns, 1u);
  // A return makes it the most recent: now it is read, and first.
  add_returns(tracker, 0, 101, 200);
  EXPECT_EQ(tracker.top(5, 10, 200)[0].key, key(0));
}

TEST(TrackerTop, SkipsExpiredEntriesWithoutDroppingThem) {
  Tracker tracker(100, milliseconds(1000), 2);
  add_returns(tracker, 1, 3, 0);
  add_returns(tracker, 2, 2, 900);
  const auto top = tracker.top(10, 100, 1500);
  ASSERT_EQ(top.size(), 1u);
  EXPECT_EQ(top[0].key, key(2));
  EXPECT_EQ(tracker.stats().entries, 2u);
  EXPECT_TRUE(tracker.top(0, 100, 1500).empty());
}

TEST(TrackerTop, BoundedAtAHundredThousandEntries) {
  Tracker tracker(100000, milliseconds(0));
  for (int i = 0; i < 100000; ++i) add_returns(tracker, i, static_cast<std::uint32_t>(i % 97), i);
  std::size_t visited = 0;
  const auto top = tracker.top(50, 2048, 200000, &visited);
  EXPECT_EQ(top.size(), 50u);
  EXPECT_EQ(visited, 16u * 2048u);
  for (const auto& sampled : top) EXPECT_EQ(sampled.entry.returns, 96u);
}

TEST(TrackerNames, KeepsTheMostRecentNamesUpToItsCapacity) {
  TrackerNames names(2);
  names.set_keep_identities(true);
  names.record(key(1), "orders", "msg-1");
  names.record(key(2), "orders", "msg-2");
  names.record(key(1), "orders", "msg-1");  // now the most recent
  names.record(key(3), "orders", "msg-3");  // drops key(2)
  EXPECT_EQ(names.size(), 2u);
  EXPECT_FALSE(names.find(key(2)));
  ASSERT_TRUE(names.find(key(1)));
  EXPECT_EQ(names.find(key(1))->queue, "orders");
  EXPECT_EQ(names.find(key(1))->identity, "msg-1");
  EXPECT_EQ(names.find(key(3))->identity, "msg-3");
}

TEST(TrackerNames, KeepsNoIdentityUnlessAsked) {
  TrackerNames names;
  names.record(key(1), "orders", "secret-id");
  ASSERT_TRUE(names.find(key(1)));
  EXPECT_EQ(names.find(key(1))->queue, "orders");
  EXPECT_EQ(names.find(key(1))->identity, "");
  // Turned on later: shown from the next return on; turned off: hidden at once.
  names.set_keep_identities(true);
  EXPECT_EQ(names.find(key(1))->identity, "");
  names.record(key(1), "orders", "secret-id");
  EXPECT_EQ(names.find(key(1))->identity, "secret-id");
  names.set_keep_identities(false);
  EXPECT_EQ(names.find(key(1))->identity, "");
}

TEST(TrackerNames, CutsLongIdentities) {
  TrackerNames names;
  names.set_keep_identities(true);
  names.record(key(1), "orders", std::string(10000, 'x'));
  const std::string identity = names.find(key(1))->identity;
  EXPECT_EQ(identity.size(), kMaxIdentityBytes);
  EXPECT_EQ(identity.substr(identity.size() - 3), "...");
}

}  // namespace
}  // namespace nackguard::retry
