// The redelivery tracker at 1M entries: nanoseconds per upsert/find, and heap bytes per entry.
// Keys are random 128-bit values (as XXH3 output is), accessed in random order, so that every
// operation pays the cache misses a large, cold tracker pays in production. Figures and the
// machine they come from are recorded in docs/tracker-memory.md.

#include <benchmark/benchmark.h>
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "proxy/retry/tracker.hpp"

namespace nackguard::retry {
namespace {

constexpr std::size_t kEntries = 1'000'000;
constexpr std::int64_t kNow = 1'700'000'000'000;
const auto kTtl = std::chrono::hours(24);

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Stands in for make_key's output without paying for the hash in every measurement.
TrackerKey synthetic_key(std::uint64_t i) {
  return TrackerKey{splitmix64(2 * i), splitmix64(2 * i + 1)};
}

// A uniform index below kEntries, cheaply: xorshift, then multiply-shift instead of modulo.
struct IndexStream {
  std::uint64_t state;
  std::uint64_t next() {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return static_cast<std::uint64_t>((static_cast<unsigned __int128>(state) * kEntries) >> 64);
  }
};

void count_return(TrackerEntry& entry) {
  ++entry.returns;
}

void fill(Tracker& tracker, std::uint64_t first, std::uint64_t count = kEntries) {
  for (std::uint64_t i = first; i < first + count; ++i) {
    tracker.upsert(synthetic_key(i), kNow, count_return);
  }
}

// One tracker holding keys 0 .. kEntries-1, shared by the benchmarks that only hit it.
Tracker& filled_tracker() {
  static Tracker* tracker = [] {
    auto* t = new Tracker(kEntries, kTtl);
    fill(*t, 0);
    return t;
  }();
  return *tracker;
}

// Bytes from malloc: the shards themselves (the node pools and hash tables are mapped directly,
// see tracker.cpp, and show up only in the process's sizes below).
std::size_t heap_bytes() {
  const struct mallinfo2 info = mallinfo2();
  return info.uordblks + info.hblkhd;  // in use from the arenas, plus mmap'ed blocks
}

struct ProcessSize {
  std::size_t virtual_bytes = 0;   // address space: what the tracker reserved
  std::size_t resident_bytes = 0;  // pages actually in memory: what it costs
};

ProcessSize process_size() {
  std::ifstream statm("/proc/self/statm");
  std::size_t total_pages = 0;
  std::size_t resident_pages = 0;
  statm >> total_pages >> resident_pages;
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return ProcessSize{total_pages * page, resident_pages * page};
}

// How much of the process sits on transparent huge pages (the tracker asks for them).
double anon_huge_mib() {
  std::ifstream rollup("/proc/self/smaps_rollup");
  std::string line;
  while (std::getline(rollup, line)) {
    if (line.rfind("AnonHugePages:", 0) == 0) return std::stod(line.substr(14)) / 1024.0;
  }
  return 0.0;
}

double per_entry(std::size_t after, std::size_t before) {
  return (static_cast<double>(after) - static_cast<double>(before)) / static_cast<double>(kEntries);
}

// Fills a fresh tracker with 1M entries and reports what that costs per entry: resident memory
// (the figure that matters), address space reserved at construction, and malloc'ed bytes.
void BM_MemoryPerEntry(benchmark::State& state) {
  for (auto _ : state) {
    const std::size_t heap_before = heap_bytes();
    const ProcessSize before = process_size();
    auto tracker = std::make_unique<Tracker>(kEntries, kTtl);
    const ProcessSize constructed = process_size();
    constexpr std::uint64_t kFew = 10'000;
    fill(*tracker, 0, kFew);
    const ProcessSize few = process_size();
    fill(*tracker, kFew, kEntries - kFew);
    const ProcessSize filled = process_size();
    const std::size_t heap_filled = heap_bytes();
    benchmark::DoNotOptimize(tracker->stats());
    state.counters["rss_B_per_entry_full"] =
        per_entry(filled.resident_bytes, before.resident_bytes);
    state.counters["rss_B_per_entry_empty"] =
        per_entry(constructed.resident_bytes, before.resident_bytes);
    // Hash slots are touched at random, so the tables become resident early; nodes fill in
    // order, shard by shard.
    state.counters["rss_MiB_at_10k_entries"] =
        static_cast<double>(few.resident_bytes - before.resident_bytes) / (1 << 20);
    state.counters["reserved_B_per_entry"] =
        per_entry(constructed.virtual_bytes, before.virtual_bytes);
    state.counters["malloc_B_per_entry"] = per_entry(heap_filled, heap_before);
    state.counters["huge_page_MiB"] = anon_huge_mib();
  }
}
BENCHMARK(BM_MemoryPerEntry)->Iterations(1)->Unit(benchmark::kMillisecond);

void BM_UpsertHit(benchmark::State& state) {
  Tracker& tracker = filled_tracker();
  IndexStream indices{0x2545f4914f6cdd1dULL + static_cast<std::uint64_t>(state.thread_index())};
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        tracker.upsert(synthetic_key(indices.next()), kNow, [](TrackerEntry& e) { ++e.returns; }));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_UpsertHit)->Threads(1)->Threads(2);

void BM_FindHit(benchmark::State& state) {
  Tracker& tracker = filled_tracker();
  IndexStream indices{0x9e3779b97f4a7c15ULL + static_cast<std::uint64_t>(state.thread_index())};
  for (auto _ : state) {
    benchmark::DoNotOptimize(tracker.find(synthetic_key(indices.next()), kNow));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_FindHit)->Threads(1)->Threads(2);

void BM_FindMiss(benchmark::State& state) {
  Tracker& tracker = filled_tracker();
  std::uint64_t i = kEntries * 1000 + static_cast<std::uint64_t>(state.thread_index()) * (1 << 30);
  for (auto _ : state) benchmark::DoNotOptimize(tracker.find(synthetic_key(i++), kNow));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_FindMiss);

// The pattern a redelivery loop makes: the tracker is full (1M entries), but returns come from
// a few thousand messages that loop, so their nodes stay in cache. kHot of the 1M keys, chosen
// spread over the whole key range.
constexpr std::uint64_t kHot = 10'000;

void BM_UpsertHitHotSet(benchmark::State& state) {
  Tracker& tracker = filled_tracker();
  IndexStream indices{0x5851f42d4c957f2dULL + static_cast<std::uint64_t>(state.thread_index())};
  for (auto _ : state) {
    const std::uint64_t i = indices.next() % kHot * (kEntries / kHot);
    benchmark::DoNotOptimize(
        tracker.upsert(synthetic_key(i), kNow, [](TrackerEntry& e) { ++e.returns; }));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_UpsertHitHotSet)->Threads(1)->Threads(2);

void BM_FindHitHotSet(benchmark::State& state) {
  Tracker& tracker = filled_tracker();
  IndexStream indices{0x14057b7ef767814fULL + static_cast<std::uint64_t>(state.thread_index())};
  for (auto _ : state) {
    const std::uint64_t i = indices.next() % kHot * (kEntries / kHot);
    benchmark::DoNotOptimize(tracker.find(synthetic_key(i), kNow));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_FindHitHotSet)->Threads(1)->Threads(2);

// Every upsert is a new key in a full tracker: insert plus eviction of the LRU entry.
void BM_UpsertNewEvicting(benchmark::State& state) {
  static Tracker* tracker = [] {
    auto* t = new Tracker(kEntries, kTtl);
    fill(*t, 0);
    return t;
  }();
  static std::atomic<std::uint64_t> next{kEntries};
  std::uint64_t i = next.fetch_add(std::uint64_t{1} << 32);
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        tracker->upsert(synthetic_key(i++), kNow, [](TrackerEntry& e) { ++e.returns; }));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_UpsertNewEvicting)->Threads(1)->Threads(2);

// The key as the session computes it: a 36-character UUID message_id on a named queue.
void BM_MakeKey(benchmark::State& state) {
  const std::string identity = "3f2b8c1e-9d4a-4b7e-8f61-0c2d5e9a7b13";
  for (auto _ : state) benchmark::DoNotOptimize(make_key("orders.eu", identity));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_MakeKey);

// What the session does at each delivery of a message that never came back: hash its identity
// and look it up in a full tracker.
void BM_MakeKeyAndFindMiss(benchmark::State& state) {
  Tracker& tracker = filled_tracker();
  std::string identity = "3f2b8c1e-9d4a-4b7e-8f61-0c2d5e9a7b13";
  std::uint64_t i = 0;
  for (auto _ : state) {
    for (int digit = 0; digit < 8; ++digit) {  // a new message every time, cheaply
      identity[static_cast<std::size_t>(digit)] = "0123456789abcdef"[(i >> (4 * digit)) & 15];
    }
    ++i;
    benchmark::DoNotOptimize(tracker.find(make_key("orders.eu", identity), kNow));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_MakeKeyAndFindMiss);

// The yardstick for the figures above: one random memory access that misses every cache, as a
// chain of dependent loads over a buffer as large as the full tracker (88 MB), on huge pages
// like the tracker's. A cold find hit needs two such accesses in a row (hash slot, then node),
// an upsert hit three (then the LRU neighbours, fetched together).
void BM_DependentRandomLoad(benchmark::State& state) {
  constexpr std::size_t kBytes = 88u << 20;
  constexpr std::size_t kLines = kBytes / 64;
  struct alignas(64) Line {
    std::uint64_t next;
  };
  static Line* const lines = [] {
    void* memory = std::aligned_alloc(2u << 20, kBytes);
    madvise(memory, kBytes, MADV_HUGEPAGE);
    auto* chain = static_cast<Line*>(memory);
    std::vector<std::uint64_t> order(kLines);
    for (std::size_t i = 0; i < kLines; ++i) order[i] = i;
    std::mt19937_64 rng(5);
    std::shuffle(order.begin() + 1, order.end(), rng);  // one cycle through every line
    for (std::size_t i = 0; i < kLines; ++i) chain[order[i]].next = order[(i + 1) % kLines];
    return chain;
  }();
  std::uint64_t at = 0;
  for (auto _ : state) {
    at = lines[at].next;
    benchmark::DoNotOptimize(at);
  }
}
BENCHMARK(BM_DependentRandomLoad);

}  // namespace
}  // namespace nackguard::retry

BENCHMARK_MAIN();
