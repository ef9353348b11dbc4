#pragma once
// Inside the registry: how one metric's series are stored. Only registry*.cpp include this.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "proxy/metrics/registry.hpp"

namespace nackguard::metrics {

struct Registry::Histogram {
  std::span<const double> bounds;
  // Per bucket, not cumulative; the last one is +Inf.
  std::unique_ptr<std::atomic<std::uint64_t>[]> buckets;
  std::atomic<std::uint64_t> sum{0};
};

struct Registry::Family {
  const MetricDef* def = nullptr;
  bool has_queue = false;
  std::size_t queue_slots = 1;  // QueueLabels::slots() with a queue label, else 1
  std::size_t fixed_count = 1;  // series per queue slot: the product of the fixed labels' sizes
  std::unique_ptr<std::atomic<std::uint64_t>[]> values;  // queue_slots * fixed_count
  Source source;                                         // guarded by sources_mutex_
  std::unique_ptr<Histogram> histogram;
};

}  // namespace nackguard::metrics
