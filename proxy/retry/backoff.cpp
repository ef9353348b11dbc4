#include "proxy/retry/backoff.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace nackguard::retry {
namespace {

// Uniform in [low, high]. Plain modulo rather than std::uniform_int_distribution, whose
// algorithm differs between standard libraries: a seeded test then gives the same values
// everywhere. The bias is below 2^-40 for any delay a policy can express.
std::int64_t uniform(std::int64_t low, std::int64_t high, std::mt19937_64& rng) {
  if (high <= low) return low;
  const auto span = static_cast<std::uint64_t>(high - low) + 1;
  return low + static_cast<std::int64_t>(rng() % span);
}

constexpr double kTierBaseMs = 1000.0;
constexpr double kTiersPerOctave = 8.0;
// Beyond about 3 years a delay is no longer a delay-queue TTL; keep it as it is.
constexpr std::int64_t kLargestTieredMs = std::int64_t{1} << 36;

std::int64_t tier_ms(std::int64_t k) {
  return std::llround(kTierBaseMs * std::exp2(static_cast<double>(k) / kTiersPerOctave));
}

}  // namespace

Millis backoff_delay(const Backoff& backoff, std::uint32_t attempt, std::mt19937_64& rng) {
  const auto max_ms = static_cast<double>(std::max<std::int64_t>(backoff.max.count(), 1));
  const double exponent = static_cast<double>(std::max<std::uint32_t>(attempt, 1) - 1);
  // pow may overflow to infinity for large attempts; min() then yields max.
  const double raw =
      static_cast<double>(backoff.initial.count()) * std::pow(backoff.multiplier, exponent);
  const double capped = std::isnan(raw) ? max_ms : std::clamp(raw, 0.0, max_ms);
  const std::int64_t d = std::llround(capped);
  const auto cap = static_cast<std::int64_t>(max_ms);

  std::int64_t result = d;
  switch (backoff.jitter) {
    case Backoff::Jitter::none:
      break;
    case Backoff::Jitter::full:
      result = uniform(0, d, rng);
      break;
    case Backoff::Jitter::fraction: {
      const double f = std::clamp(backoff.jitter_fraction, 0.0, 1.0);
      const std::int64_t low = std::llround(static_cast<double>(d) * (1.0 - f));
      const std::int64_t high = std::llround(static_cast<double>(d) * (1.0 + f));
      result = std::min(uniform(low, high, rng), cap);
      break;
    }
  }
  return Millis(std::max<std::int64_t>(result, 1));
}

Millis delay_tier(Millis delay, bool exact) {
  if (exact) return delay;
  const std::int64_t d = std::max<std::int64_t>(delay.count(), 1);
  if (d >= kLargestTieredMs) return Millis(d);
  // The tier index whose value is at or just below d, then the nearest of its neighbours;
  // the floating-point estimate may be off by one either way, hence the range of four.
  const auto k0 = static_cast<std::int64_t>(
      std::floor(kTiersPerOctave * std::log2(static_cast<double>(d) / kTierBaseMs)));
  std::int64_t best = tier_ms(k0 - 1);
  for (std::int64_t k = k0; k <= k0 + 2; ++k) {
    const std::int64_t candidate = tier_ms(k);
    // Ties go to the lower tier, which keeps the mapping monotone.
    if (std::llabs(candidate - d) < std::llabs(best - d)) best = candidate;
  }
  return Millis(std::max<std::int64_t>(best, 1));
}

}  // namespace nackguard::retry
