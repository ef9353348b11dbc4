#pragma once
// A run's figures, as a table for people and as one JSON line for scripts.

#include <sys/types.h>

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "loadgen/options.hpp"

namespace nackguard::bench {

struct PidReport {
  pid_t pid = 0;
  std::string name;
  bool ok = false;          // readable at the start and the end of the run
  bool peak_reset = false;  // peak_rss_kb covers the run only (else: since the process started)
  double cpu_s = 0;
  double cpu_publish_s = 0;  // sequential mode: the publishing phase alone
  double cpu_consume_s = 0;  // sequential mode: the consuming phase alone
  double user_cpu_s = 0;     // of cpu_s, the time in user space (utime)
  // RSS before the run's connections were opened: (peak - this) / connections is what one
  // connection costs the process.
  std::uint64_t rss_before_connect_kb = 0;
  std::uint64_t rss_start_kb = 0;
  std::uint64_t rss_end_kb = 0;
  std::uint64_t peak_rss_kb = 0;
};

struct LatencySummary {
  std::uint64_t count = 0;
  double p50_us = 0, p99_us = 0, p999_us = 0, max_us = 0;
};

// One --targets target's share of a paired run.
struct TargetLatency {
  std::string label;
  LatencySummary latency;
};

struct RunResult {
  bool ok = false;
  std::string error;
  double publish_s = 0;  // from the start to the last confirm
  double consume_s = 0;  // from basic.consume (sequential) or the start, to the last ack
  std::uint64_t published = 0, confirmed = 0, broker_nacks = 0;
  std::uint64_t deliveries = 0, acked = 0, nacked = 0, redelivered = 0;
  std::uint64_t duplicates = 0, missing = 0;
  LatencySummary latency;
  std::vector<TargetLatency> latency_by_target;  // in --targets order; empty without it
  std::vector<PidReport> pids;
  double self_cpu_s = 0;
  double load_start = -1, load_end = -1;
};

// Sorts `latencies_ns` in place.
LatencySummary summarize_latency(std::vector<std::int64_t>& latencies_ns);

void print_table(std::ostream& out, const Options& options, const RunResult& result);
void print_json(std::ostream& out, const Options& options, const RunResult& result);

}  // namespace nackguard::bench
