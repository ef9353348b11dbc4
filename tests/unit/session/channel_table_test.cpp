// The channel table alone: a channel stays where it is while the map grows, and the
// remembered last lookup never outlives its entry.

#include <gtest/gtest.h>

#include "proxy/session/channel_table.hpp"

namespace nackguard::session {
namespace {

TEST(ChannelTable, ALookupCreatesTheChannelOnceAndFindsItAfterOthers) {
  ChannelTable table;
  table[1].book.last_declared_queue = "q1";
  table[2].book.last_declared_queue = "q2";
  EXPECT_EQ(table.size(), 2u);
  EXPECT_EQ(table[1].book.last_declared_queue, "q1");
  EXPECT_EQ(table[2].book.last_declared_queue, "q2");
  EXPECT_EQ(&table[1], &table.find(1)->second);
}

TEST(ChannelTable, AChannelStaysWhereItWasWhileTheMapGrows) {
  ChannelTable table;
  ChannelState* first = &table[7];
  first->book.last_declared_queue = "kept";
  for (std::uint16_t n = 100; n < 1100; ++n) table[n].book.last_declared_queue = "grown";
  EXPECT_EQ(table.size(), 1001u);
  EXPECT_EQ(&table[7], first);
  EXPECT_EQ(table[7].book.last_declared_queue, "kept");
  EXPECT_EQ(table[1099].book.last_declared_queue, "grown");
}

// A channel closed and opened again under the same number starts empty, though it was the
// last one looked up.
TEST(ChannelTable, AnErasedChannelIsNotRemembered) {
  ChannelTable table;
  table[3].book.last_declared_queue = "old";
  table.erase(table.find(3));
  EXPECT_EQ(table.find(3), table.end());
  EXPECT_EQ(table[3].book.last_declared_queue, "");
  EXPECT_EQ(table.size(), 1u);
}

TEST(ChannelTable, ClearedChannelsAreNotRemembered) {
  ChannelTable table;
  table[5].book.last_declared_queue = "old";
  table.clear();
  EXPECT_EQ(table.size(), 0u);
  EXPECT_EQ(table[5].book.last_declared_queue, "");
}

}  // namespace
}  // namespace nackguard::session
