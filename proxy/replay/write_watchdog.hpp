#pragma once
// A deadline for rabbitmq-c's writes, which have none: a broker that stops reading (a memory
// or disk alarm blocks publishing connections) would hold a blocking publish forever. While
// armed, a thread waits for the deadline and then shuts the socket down, which ends the
// write with an error; fired() then tells why.

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

namespace nackguard::replay {

class WriteWatchdog {
 public:
  using Clock = std::chrono::steady_clock;

  explicit WriteWatchdog(std::chrono::milliseconds limit);
  ~WriteWatchdog();
  WriteWatchdog(const WriteWatchdog&) = delete;
  WriteWatchdog& operator=(const WriteWatchdog&) = delete;

  // Arms the deadline (now + limit) for writes on `fd` until the returned guard goes.
  class Armed {
   public:
    explicit Armed(WriteWatchdog& watchdog) : watchdog_(watchdog) {}
    ~Armed() { watchdog_.disarm(); }
    Armed(const Armed&) = delete;
    Armed& operator=(const Armed&) = delete;

   private:
    WriteWatchdog& watchdog_;
  };
  [[nodiscard]] Armed arm(int fd);

  // True once a write outlived its deadline and the socket was shut down.
  bool fired() const;
  std::chrono::milliseconds limit() const { return limit_; }

 private:
  void disarm();
  void watch(std::stop_token stop);

  const std::chrono::milliseconds limit_;
  mutable std::mutex mutex_;
  std::condition_variable_any changed_;
  std::optional<Clock::time_point> deadline_;
  int fd_ = -1;
  bool fired_ = false;
  std::jthread thread_;  // last: started once the rest is ready
};

}  // namespace nackguard::replay
