#pragma once
// CPU time and memory of another process, from /proc/PID/stat and /proc/PID/status.

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace nackguard::bench {

struct ProcSample {
  bool ok = false;           // the process existed and its files could be read
  double cpu_s = 0;          // utime + stime of all its threads
  double user_cpu_s = 0;     // utime alone: the time in user space
  std::uint64_t rss_kb = 0;  // VmRSS
  std::uint64_t hwm_kb = 0;  // VmHWM: the peak RSS since start, or since reset_peak_rss
};

ProcSample sample_process(pid_t pid);
// Resets VmHWM to the current RSS (writes 5 to /proc/PID/clear_refs; needs the rights to
// ptrace it). False if that is not allowed: VmHWM is then the peak since the process started.
bool reset_peak_rss(pid_t pid);
// /proc/PID/comm, or "?".
std::string process_name(pid_t pid);
// CPU seconds this process has used (all threads).
double self_cpu_seconds();
// /proc/loadavg's 1-minute figure, or -1.
double load_average_1m();

}  // namespace nackguard::bench
