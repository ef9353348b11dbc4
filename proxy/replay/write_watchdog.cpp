#include "proxy/replay/write_watchdog.hpp"

#include <sys/socket.h>

namespace nackguard::replay {

WriteWatchdog::WriteWatchdog(std::chrono::milliseconds limit)
    : limit_(limit), thread_([this](std::stop_token stop) { watch(stop); }) {}

WriteWatchdog::~WriteWatchdog() {
  thread_.request_stop();
  changed_.notify_all();
}

WriteWatchdog::Armed WriteWatchdog::arm(int fd) {
  {
    std::lock_guard lock(mutex_);
    fd_ = fd;
    deadline_ = Clock::now() + limit_;
  }
  changed_.notify_all();
  return Armed(*this);
}

void WriteWatchdog::disarm() {
  std::lock_guard lock(mutex_);
  deadline_.reset();
}

bool WriteWatchdog::fired() const {
  std::lock_guard lock(mutex_);
  return fired_;
}

void WriteWatchdog::watch(std::stop_token stop) {
  std::unique_lock lock(mutex_);
  while (!stop.stop_requested()) {
    if (!deadline_) {
      changed_.wait(lock, stop, [this] { return deadline_.has_value(); });
      continue;
    }
    const Clock::time_point deadline = *deadline_;
    if (changed_.wait_until(lock, stop, deadline, [&] { return deadline_ != deadline; })) {
      continue;  // disarmed or re-armed in time
    }
    if (stop.stop_requested() || deadline_ != deadline) continue;
    ::shutdown(fd_, SHUT_RDWR);
    fired_ = true;
    deadline_.reset();
  }
}

}  // namespace nackguard::replay
