#include "proxy/retry/backoff.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <set>
#include <vector>

namespace nackguard::retry {
namespace {

Backoff exponential(Backoff::Jitter jitter, double fraction = 0.0) {
  return Backoff{Millis(1000), 2.0, Millis(600'000), jitter, fraction};
}

TEST(BackoffDelay, NoJitterDoublesUpToMax) {
  std::mt19937_64 rng(1);
  const Backoff backoff = exponential(Backoff::Jitter::none);
  const std::int64_t expected_seconds[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 600, 600};
  for (std::uint32_t attempt = 1; attempt <= 12; ++attempt) {
    EXPECT_EQ(backoff_delay(backoff, attempt, rng), Millis(expected_seconds[attempt - 1] * 1000))
        << "attempt " << attempt;
  }
}

TEST(BackoffDelay, EdgeCases) {
  std::mt19937_64 rng(1);
  const Backoff backoff = exponential(Backoff::Jitter::none);
  EXPECT_EQ(backoff_delay(backoff, 0, rng), Millis(1000));  // treated as the first attempt
  EXPECT_EQ(backoff_delay(backoff, 4'000'000'000u, rng), Millis(600'000));  // pow overflows

  Backoff zero = backoff;
  zero.initial = Millis(0);
  EXPECT_EQ(backoff_delay(zero, 3, rng), Millis(1));  // at least 1 ms

  Backoff constant = backoff;
  constant.multiplier = 1.0;
  constant.initial = Millis(2500);
  EXPECT_EQ(backoff_delay(constant, 9, rng), Millis(2500));

  Backoff fractional = backoff;
  fractional.multiplier = 1.5;
  EXPECT_EQ(backoff_delay(fractional, 3, rng), Millis(2250));

  Backoff low_cap = backoff;
  low_cap.max = Millis(300);
  EXPECT_EQ(backoff_delay(low_cap, 1, rng), Millis(300));  // the cap applies from the start
}

TEST(BackoffDelay, FullJitterIsUniformUpToTheDelay) {
  std::mt19937_64 rng(42);
  const Backoff backoff = exponential(Backoff::Jitter::full);
  constexpr int kSamples = 200'000;
  const std::int64_t d = 8000;  // attempt 4
  double sum = 0;
  std::int64_t low = d;
  std::int64_t high = 0;
  for (int i = 0; i < kSamples; ++i) {
    const std::int64_t ms = backoff_delay(backoff, 4, rng).count();
    ASSERT_GE(ms, 1);
    ASSERT_LE(ms, d);
    sum += static_cast<double>(ms);
    low = std::min(low, ms);
    high = std::max(high, ms);
  }
  EXPECT_NEAR(sum / kSamples, d / 2.0, d * 0.01);
  EXPECT_LT(low, d / 100);  // the whole range is used
  EXPECT_GT(high, d - d / 100);
}

TEST(BackoffDelay, FullJitterStaysUnderMax) {
  std::mt19937_64 rng(7);
  const Backoff backoff = exponential(Backoff::Jitter::full);
  for (int i = 0; i < 10'000; ++i) {
    const Millis delay = backoff_delay(backoff, 20, rng);
    ASSERT_GE(delay, Millis(1));
    ASSERT_LE(delay, Millis(600'000));
  }
}

TEST(BackoffDelay, FractionJitterBounds) {
  std::mt19937_64 rng(3);
  const Backoff backoff = exponential(Backoff::Jitter::fraction, 0.2);
  double sum = 0;
  constexpr int kSamples = 100'000;
  for (int i = 0; i < kSamples; ++i) {
    const std::int64_t ms = backoff_delay(backoff, 4, rng).count();  // d = 8000
    ASSERT_GE(ms, 6400);
    ASSERT_LE(ms, 9600);
    sum += static_cast<double>(ms);
  }
  EXPECT_NEAR(sum / kSamples, 8000.0, 80.0);

  // Near the cap the upper half is clipped to max: d = 512 s, [409.6 s, 614.4 s] -> 600 s.
  int at_max = 0;
  for (int i = 0; i < 10'000; ++i) {
    const std::int64_t ms = backoff_delay(backoff, 10, rng).count();
    ASSERT_GE(ms, 409'600);
    ASSERT_LE(ms, 600'000);
    at_max += ms == 600'000 ? 1 : 0;
  }
  EXPECT_GT(at_max, 500);  // about 14% of the range lies above the cap
}

TEST(BackoffDelay, SameSeedSameDelays) {
  const Backoff backoff = exponential(Backoff::Jitter::full);
  std::mt19937_64 a(2024);
  std::mt19937_64 b(2024);
  for (std::uint32_t attempt = 1; attempt <= 30; ++attempt) {
    EXPECT_EQ(backoff_delay(backoff, attempt, a), backoff_delay(backoff, attempt, b));
  }
}

TEST(DelayTier, PowersOfTwoSecondsAreExactTiers) {
  for (int n = 0; n <= 20; ++n) {
    const Millis delay((std::int64_t{1} << n) * 1000);
    EXPECT_EQ(delay_tier(delay, false), delay) << "2^" << n << " s";
  }
  EXPECT_EQ(delay_tier(Millis(500), false), Millis(500));  // 2^-1 s
  EXPECT_EQ(delay_tier(Millis(250), false), Millis(250));
}

TEST(DelayTier, TiersAreEighthOctaves) {
  // round(1000 * 2^(k/8)) for k = 0..8.
  const std::int64_t tiers[] = {1000, 1091, 1189, 1297, 1414, 1542, 1682, 1834, 2000};
  for (const std::int64_t tier : tiers) {
    EXPECT_EQ(delay_tier(Millis(tier), false), Millis(tier));
  }
  EXPECT_EQ(delay_tier(Millis(1040), false), Millis(1000));  // nearer 1000 than 1091
  EXPECT_EQ(delay_tier(Millis(1050), false), Millis(1091));
  EXPECT_EQ(delay_tier(Millis(600'000), false), Millis(608'874));  // 2^(74/8) s
}

TEST(DelayTier, ExactDelaysAreKept) {
  for (const std::int64_t ms : {1, 999, 1001, 1500, 12'345, 600'000}) {
    EXPECT_EQ(delay_tier(Millis(ms), true), Millis(ms));
  }
}

TEST(DelayTier, NearestWithinFourAndAHalfPercentAndMonotone) {
  std::set<std::int64_t> tiers_between_1s_and_10m;
  std::int64_t previous = 0;
  double worst = 0;
  for (std::int64_t ms = 1; ms <= 3'600'000; ms += (ms < 20'000 ? 1 : 7)) {
    const std::int64_t tier = delay_tier(Millis(ms), false).count();
    ASSERT_GE(tier, previous) << "not monotone at " << ms;
    previous = tier;
    ASSERT_EQ(delay_tier(Millis(tier), false).count(), tier) << "a tier maps to itself";
    // Below 200 ms the tiers' rounding to whole milliseconds adds to the gap (up to 6.7% near
    // 15 ms); backoff delays that short are not worth a delay queue's precision anyway.
    if (ms >= 200) {
      const double distance = std::abs(static_cast<double>(tier - ms)) / static_cast<double>(ms);
      worst = std::max(worst, distance);
    }
    if (ms >= 1000 && ms <= 600'000) tiers_between_1s_and_10m.insert(tier);
  }
  EXPECT_LE(worst, 0.045);
  // 8 per octave over log2(600) octaves, plus the ends: a few dozen delay queues, not thousands.
  EXPECT_GE(tiers_between_1s_and_10m.size(), 70u);
  EXPECT_LE(tiers_between_1s_and_10m.size(), 78u);
}

TEST(DelayTier, NonPositiveDelaysBecomeOneMillisecond) {
  EXPECT_EQ(delay_tier(Millis(0), false), Millis(1));
  EXPECT_EQ(delay_tier(Millis(-5), false), Millis(1));
}

}  // namespace
}  // namespace nackguard::retry
