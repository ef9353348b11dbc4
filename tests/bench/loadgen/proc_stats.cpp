#include "loadgen/proc_stats.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

namespace nackguard::bench {

namespace {

std::string proc_path(pid_t pid, const char* file) {
  return "/proc/" + std::to_string(pid) + "/" + file;
}

// The value of a "Key:   123 kB" line of /proc/PID/status.
std::uint64_t status_kb(const std::string& status, const std::string& key) {
  std::size_t at = status.find("\n" + key + ":");
  if (at == std::string::npos) return 0;
  std::istringstream line(status.substr(at + key.size() + 2, 64));
  std::uint64_t kb = 0;
  line >> kb;
  return kb;
}

}  // namespace

ProcSample sample_process(pid_t pid) {
  ProcSample s;
  std::ifstream stat_file(proc_path(pid, "stat"));
  std::string stat((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
  // The command name is in parentheses and may hold spaces: fields count from the last ')'.
  std::size_t close = stat.rfind(')');
  if (close == std::string::npos) return s;
  std::istringstream fields(stat.substr(close + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  // Field 3 (state) is the first after ')'; utime and stime are fields 14 and 15.
  for (int n = 3; n <= 15 && fields >> field; ++n) {
    if (n == 14) utime = std::stoull(field);
    if (n == 15) stime = std::stoull(field);
  }
  const auto ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  s.cpu_s = static_cast<double>(utime + stime) / ticks;
  s.user_cpu_s = static_cast<double>(utime) / ticks;

  std::ifstream status_file(proc_path(pid, "status"));
  std::string status = "\n" + std::string((std::istreambuf_iterator<char>(status_file)),
                                          std::istreambuf_iterator<char>());
  s.rss_kb = status_kb(status, "VmRSS");
  s.hwm_kb = status_kb(status, "VmHWM");
  s.ok = true;
  return s;
}

bool reset_peak_rss(pid_t pid) {
  std::ofstream clear(proc_path(pid, "clear_refs"));
  clear << "5\n";
  clear.flush();
  return static_cast<bool>(clear);
}

std::string process_name(pid_t pid) {
  std::ifstream comm(proc_path(pid, "comm"));
  std::string name;
  if (!std::getline(comm, name)) return "?";
  return name;
}

double self_cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& tv) {
    return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) / 1e6;
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

double load_average_1m() {
  std::ifstream loadavg("/proc/loadavg");
  double one = -1;
  loadavg >> one;
  return one;
}

}  // namespace nackguard::bench
