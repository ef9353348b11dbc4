// AddressPicker: the order a client connection tries the upstream addresses in, with a clock
// the test moves by hand.

#include "proxy/net/address_picker.hpp"

#include <gtest/gtest.h>

#include <map>
#include <vector>

namespace nackguard::net {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Indices = std::vector<std::size_t>;

class AddressPickerTest : public ::testing::Test {
 protected:
  AddressPicker picker(std::size_t count) {
    return AddressPicker(count, [this] { return now_; });
  }
  // Address `index` fails, then `wait` goes by.
  void fail_then_wait(AddressPicker& p, std::size_t index, seconds wait) {
    p.failed(index);
    now_ += wait;
  }
  AddressPicker::Clock::time_point now_{seconds(1000)};
};

TEST_F(AddressPickerTest, EachConnectionStartsOneAddressFurtherOn) {
  AddressPicker p = picker(3);
  EXPECT_EQ(p.plan(), (Indices{0, 1, 2}));
  EXPECT_EQ(p.plan(), (Indices{1, 2, 0}));
  EXPECT_EQ(p.plan(), (Indices{2, 0, 1}));
  EXPECT_EQ(p.plan(), (Indices{0, 1, 2}));
}

TEST_F(AddressPickerTest, ConnectionsSpreadEvenlyOverTheNodes) {
  AddressPicker p = picker(3);
  std::map<std::size_t, int> first;
  for (int i = 0; i < 300; ++i) ++first[p.plan().front()];
  EXPECT_EQ(first, (std::map<std::size_t, int>{{0, 100}, {1, 100}, {2, 100}}));
}

TEST_F(AddressPickerTest, AFailedAddressIsSkippedForFiveSeconds) {
  AddressPicker p = picker(3);
  p.failed(1);
  EXPECT_TRUE(p.skipped(1));
  EXPECT_FALSE(p.skipped(0));
  EXPECT_EQ(p.plan(), (Indices{0, 2}));
  EXPECT_EQ(p.plan(), (Indices{2, 0}));
  now_ += seconds(5) - milliseconds(1);
  EXPECT_TRUE(p.skipped(1));
  EXPECT_EQ(p.plan().size(), 2u);
  now_ += milliseconds(1);
  EXPECT_FALSE(p.skipped(1));
  EXPECT_EQ(p.plan().size(), 3u);
}

TEST_F(AddressPickerTest, ASkippedNodesShareGoesEvenlyToTheOthers) {
  AddressPicker p = picker(3);
  p.failed(1);
  std::map<std::size_t, int> first;
  for (int i = 0; i < 100; ++i) ++first[p.plan().front()];
  EXPECT_EQ(first, (std::map<std::size_t, int>{{0, 50}, {2, 50}}));
}

TEST_F(AddressPickerTest, ASuccessEndsTheSkipAtOnce) {
  AddressPicker p = picker(2);
  p.failed(0);
  EXPECT_EQ(p.plan(), (Indices{1}));
  p.succeeded(0);
  EXPECT_FALSE(p.skipped(0));
  EXPECT_EQ(p.plan().size(), 2u);
}

TEST_F(AddressPickerTest, AnotherFailureRestartsTheFiveSeconds) {
  AddressPicker p = picker(2);
  fail_then_wait(p, 0, seconds(4));
  fail_then_wait(p, 0, seconds(4));
  EXPECT_TRUE(p.skipped(0));
  now_ += seconds(1);
  EXPECT_FALSE(p.skipped(0));
}

TEST_F(AddressPickerTest, WhenAllAreSkippedTheOldestFailureIsStillTried) {
  AddressPicker p = picker(3);
  fail_then_wait(p, 2, seconds(1));
  fail_then_wait(p, 0, seconds(1));
  p.failed(1);
  EXPECT_EQ(p.plan(), (Indices{2}));
  // That one fails again: now 0 failed longest ago.
  p.failed(2);
  EXPECT_EQ(p.plan(), (Indices{0}));
}

TEST_F(AddressPickerTest, OneAddressIsAlwaysTried) {
  AddressPicker p = picker(1);
  EXPECT_EQ(p.plan(), (Indices{0}));
  p.failed(0);
  EXPECT_EQ(p.plan(), (Indices{0}));
  EXPECT_EQ(p.plan(), (Indices{0}));
}

TEST_F(AddressPickerTest, ANodeBackIsUsedAgainAfterItsSkip) {
  AddressPicker p = picker(3);
  for (std::size_t i = 0; i < 3; ++i) p.failed(i);
  now_ += seconds(6);
  // The skip is over for every one of them: the rotation is back to all three.
  EXPECT_EQ(p.plan().size(), 3u);
}

TEST_F(AddressPickerTest, OutOfRangeIndicesAreIgnored) {
  AddressPicker p = picker(2);
  p.failed(7);
  p.succeeded(7);
  EXPECT_FALSE(p.skipped(7));
  EXPECT_EQ(p.plan().size(), 2u);
}

TEST(AddressPicker, NeedsAnAddress) {
  EXPECT_THROW(AddressPicker(0), std::invalid_argument);
}

}  // namespace
}  // namespace nackguard::net
