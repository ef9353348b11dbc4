#include "loadgen/run.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <ctime>
#include <latch>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "loadgen/consumer.hpp"
#include "loadgen/proc_stats.hpp"
#include "loadgen/publisher.hpp"

namespace nackguard::bench {

namespace {

double seconds_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

class Run {
 public:
  explicit Run(const Options& options) : options_(options) {}

  RunResult execute();
  // Some threads were left blocked (detached): this object must outlive them, i.e. be leaked.
  bool abandoned() const { return abandoned_; }

 private:
  void fail(const std::string& why) {
    std::lock_guard lock(mutex_);
    if (error_.empty()) error_ = why;
    progress_.abort = true;
  }
  void start_workers();
  void open_publish() {
    if (!publish_open_) go_publish_.count_down();
    publish_open_ = true;
  }
  void open_consume() {
    if (!consume_open_) go_consume_.count_down();
    consume_open_ = true;
  }
  // Waits until `count` reaches `target`; false if the run was aborted (stall, timeout, error).
  bool wait_for(const std::atomic<std::uint32_t>& count, std::uint32_t target);
  // After an abort: gives the threads a moment to notice, false if some are stuck in a write.
  bool join_all(std::chrono::seconds grace);
  std::vector<ProcSample> sample_pids() const;
  void finish_pid_reports(RunResult& r, const std::vector<ProcSample>& start,
                          const std::vector<ProcSample>& middle,
                          const std::vector<ProcSample>& end) const;

  const Options& options_;
  Progress progress_;
  std::mutex mutex_;
  std::string error_;
  std::vector<std::string> queues_;
  std::vector<std::unique_ptr<Publisher>> publishers_;
  std::vector<std::unique_ptr<Consumer>> consumers_;
  std::vector<std::thread> threads_;
  std::unique_ptr<std::latch> connected_;
  // Each is opened exactly once (open_publish, open_consume): a latch counted below zero
  // never opens for the threads that wait on it.
  std::latch go_publish_{1};
  std::latch go_consume_{1};
  bool publish_open_ = false;
  bool consume_open_ = false;
  Clock::time_point publish_start_{};
  std::atomic<std::uint32_t> publishers_done_{0};
  std::atomic<std::uint32_t> consumers_done_{0};
  Clock::time_point run_start_{};
  bool abandoned_ = false;
};

void Run::start_workers() {
  for (std::unique_ptr<Publisher>& p : publishers_) {
    threads_.emplace_back([this, p = p.get()] {
      try {
        p->connect();
      } catch (const std::exception& e) {
        fail(std::string("publisher: ") + e.what());
      }
      connected_->count_down();
      go_publish_.wait();
      if (!progress_.aborted()) {
        try {
          p->run(publish_start_);
        } catch (const std::exception& e) {
          fail(std::string("publisher: ") + e.what());
        }
      }
      publishers_done_.fetch_add(1);
    });
  }
  for (std::unique_ptr<Consumer>& c : consumers_) {
    threads_.emplace_back([this, c = c.get()] {
      try {
        c->connect();
      } catch (const std::exception& e) {
        fail(std::string("consumer: ") + e.what());
      }
      connected_->count_down();
      go_consume_.wait();
      if (!progress_.aborted()) {
        try {
          c->run();
        } catch (const std::exception& e) {
          fail(std::string("consumer: ") + e.what());
        }
      }
      consumers_done_.fetch_add(1);
    });
  }
}

bool Run::wait_for(const std::atomic<std::uint32_t>& count, std::uint32_t target) {
  std::uint64_t last_moved = progress_.moved();
  auto last_change = Clock::now();
  while (count.load() < target) {
    if (progress_.aborted()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const auto now = Clock::now();
    const std::uint64_t moved = progress_.moved();
    if (moved != last_moved) {
      last_moved = moved;
      last_change = now;
    }
    char state[160];
    std::snprintf(state, sizeof state, "published %llu, confirmed %llu, delivered %llu, acked %llu",
                  static_cast<unsigned long long>(progress_.published.load()),
                  static_cast<unsigned long long>(progress_.confirmed.load()),
                  static_cast<unsigned long long>(progress_.delivered.load()),
                  static_cast<unsigned long long>(progress_.acked.load()));
    if (seconds_between(last_change, now) > options_.stall_timeout_s) {
      fail("nothing moved for " + std::to_string(static_cast<int>(options_.stall_timeout_s)) +
           " s (" + state + ")");
    } else if (seconds_between(run_start_, now) > options_.timeout_s) {
      fail("timed out after " + std::to_string(static_cast<int>(options_.timeout_s)) + " s (" +
           state + ")");
    }
  }
  return !progress_.aborted();
}

bool Run::join_all(std::chrono::seconds grace) {
  const auto total = static_cast<std::uint32_t>(publishers_.size() + consumers_.size());
  const auto deadline = Clock::now() + grace;
  while (publishers_done_.load() + consumers_done_.load() < total && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (publishers_done_.load() + consumers_done_.load() < total) return false;
  for (std::thread& t : threads_) t.join();
  return true;
}

std::vector<ProcSample> Run::sample_pids() const {
  std::vector<ProcSample> samples;
  for (pid_t pid : options_.pids) samples.push_back(sample_process(pid));
  return samples;
}

void Run::finish_pid_reports(RunResult& r, const std::vector<ProcSample>& start,
                             const std::vector<ProcSample>& middle,
                             const std::vector<ProcSample>& end) const {
  for (std::size_t i = 0; i < options_.pids.size(); ++i) {
    PidReport& p = r.pids[i];
    p.ok = start[i].ok && end[i].ok;
    p.cpu_s = end[i].cpu_s - start[i].cpu_s;
    p.user_cpu_s = end[i].user_cpu_s - start[i].user_cpu_s;
    p.cpu_publish_s = middle[i].cpu_s - start[i].cpu_s;
    p.cpu_consume_s = end[i].cpu_s - middle[i].cpu_s;
    p.rss_start_kb = start[i].rss_kb;
    p.rss_end_kb = end[i].rss_kb;
    p.peak_rss_kb = end[i].hwm_kb;
  }
}

RunResult Run::execute() {
  RunResult r;
  const std::string run_id = std::to_string(getpid()) + "-" + std::to_string(std::time(nullptr));
  const std::uint32_t c = options_.connections;
  std::unique_ptr<AmqpLink> setup;
  try {
    setup = std::make_unique<AmqpLink>(options_);
    for (std::uint32_t i = 0; i < c; ++i) {
      queues_.push_back("nackguard-bench." + run_id + "." + std::to_string(i));
      setup->declare_queue(queues_.back());
    }
  } catch (const std::exception& e) {
    r.error = std::string("setup: ") + e.what();
    return r;
  }
  for (std::uint32_t i = 0; i < c; ++i) {
    const std::uint64_t share = options_.messages / c + (i < options_.messages % c ? 1 : 0);
    publishers_.push_back(
        std::make_unique<Publisher>(options_, queues_[i], i, share, run_id, progress_));
    consumers_.push_back(std::make_unique<Consumer>(options_, queues_[i], i, share, progress_));
  }

  for (std::size_t i = 0; i < options_.pids.size(); ++i) {
    PidReport p;
    p.pid = options_.pids[i];
    p.name = process_name(p.pid);
    p.peak_reset = reset_peak_rss(p.pid);
    p.rss_before_connect_kb = sample_process(p.pid).rss_kb;
    r.pids.push_back(p);
  }
  run_start_ = Clock::now();
  connected_ = std::make_unique<std::latch>(2 * static_cast<std::ptrdiff_t>(c));
  start_workers();
  connected_->wait();

  r.load_start = load_average_1m();
  const double self_start = self_cpu_seconds();
  const std::vector<ProcSample> start = sample_pids();
  std::vector<ProcSample> middle = start;
  const auto t0 = Clock::now();
  Clock::time_point consume_start = t0;
  publish_start_ = t0;
  bool ok = !progress_.aborted();
  if (options_.mode == Mode::concurrent) {
    open_consume();
    open_publish();
    ok = ok && wait_for(publishers_done_, c) && wait_for(consumers_done_, c);
  } else {
    open_publish();
    ok = ok && wait_for(publishers_done_, c);
    middle = sample_pids();
    consume_start = Clock::now();
    open_consume();
    ok = ok && wait_for(consumers_done_, c);
  }
  open_publish();  // whatever happened, no thread may be left waiting to start
  open_consume();
  const std::vector<ProcSample> end = sample_pids();
  r.self_cpu_s = self_cpu_seconds() - self_start;
  r.load_end = load_average_1m();
  finish_pid_reports(r, start, middle, end);

  if (!join_all(std::chrono::seconds(10))) {
    // A thread is blocked writing to a peer that stopped reading: report and leave.
    r.error = error_ + " (some connections did not stop)";
    for (std::thread& t : threads_) t.detach();
    abandoned_ = true;
    return r;
  }
  Clock::time_point publish_end = t0, consume_end = consume_start;
  std::vector<std::int64_t> latencies;
  std::vector<std::vector<std::int64_t>> by_target(options_.targets.size());
  for (auto& p : publishers_) {
    publish_end = std::max(publish_end, p->finished());
    r.broker_nacks += p->broker_nacks();
  }
  for (std::size_t i = 0; i < consumers_.size(); ++i) {
    const Consumer* cons = consumers_[i].get();
    consume_end = std::max(consume_end, cons->finished());
    latencies.insert(latencies.end(), cons->latencies().begin(), cons->latencies().end());
    if (!by_target.empty()) {
      std::vector<std::int64_t>& mine = by_target[i % by_target.size()];  // as connection_port
      mine.insert(mine.end(), cons->latencies().begin(), cons->latencies().end());
    }
    r.nacked += cons->nacked();
    r.redelivered += cons->redelivered();
    r.duplicates += cons->duplicates();
    r.missing += cons->missing();
    r.deliveries += cons->deliveries();
  }
  r.publish_s = seconds_between(t0, publish_end);
  r.consume_s = seconds_between(consume_start, consume_end);
  r.published = progress_.published.load();
  r.confirmed = progress_.confirmed.load();
  r.acked = progress_.acked.load();
  r.latency = summarize_latency(latencies);
  for (std::size_t t = 0; t < by_target.size(); ++t) {
    r.latency_by_target.push_back({options_.targets[t].label, summarize_latency(by_target[t])});
  }

  try {
    for (const std::string& q : queues_) setup->delete_queue(q);
    setup->close();
  } catch (const std::exception& e) {
    if (error_.empty()) error_ = std::string("deleting the queues: ") + e.what();
  }
  if (ok && error_.empty()) {
    if (r.broker_nacks > 0) {
      error_ = std::to_string(r.broker_nacks) + " publishes nacked by the broker";
    } else if (r.missing > 0 || r.duplicates > 0) {
      error_ = std::to_string(r.missing) + " messages never acked, " +
               std::to_string(r.duplicates) + " delivered again after their ack";
    }
  }
  r.error = error_;
  r.ok = ok && error_.empty();
  return r;
}

}  // namespace

RunResult run_bench(const Options& options) {
  auto run = std::make_unique<Run>(options);
  RunResult result = run->execute();
  if (run->abandoned()) static_cast<void>(run.release());
  return result;
}

}  // namespace nackguard::bench
