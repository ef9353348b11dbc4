#pragma once
// Reloads when the config file or a policy file changes: inotify watches on the config file's
// directory and on policies_dir, read through Asio, their events merged into one reload once
// they settle (watch_rules.hpp decides what an event means and when). Works with files
// written in place, files renamed over, and Kubernetes ConfigMap volumes (..data swapped).
//
// Never stops the proxy: where inotify or a watch is unavailable it logs a warning naming the
// path, and SIGHUP still reloads.

#include <array>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <map>
#include <string>

#include "proxy/net/watch_rules.hpp"

namespace nackguard::net {

class ConfigWatcher {
 public:
  // Called on `executor` with what changed (for the log line), once the changes settle.
  using Reload = std::function<void(const std::string& what)>;

  ConfigWatcher(boost::asio::any_io_executor executor, Reload reload);
  ConfigWatcher(const ConfigWatcher&) = delete;
  ConfigWatcher& operator=(const ConfigWatcher&) = delete;

  // Starts watching the directory of `config_file` and `policies_dir`. Call once, on the
  // executor or before the io_context runs.
  void start(const std::filesystem::path& config_file, const std::filesystem::path& policies_dir);
  // Watches `policies_dir` afresh, after a reload: it may name another directory, or its path
  // may now lead to another one (a ConfigMap's ..data swapped under a symbolic link). Also
  // watches the config file's directory again if its watch was lost. Call on the executor.
  void follow(const std::filesystem::path& policies_dir);
  // Stops watching; no reload starts after it. Call on the executor.
  void cancel();

 private:
  void read_events();
  void on_events(std::size_t bytes);
  void on_change(const EventMeaning& meaning);
  void wait_for_quiet();
  int add_watch(const std::filesystem::path& dir);
  void watch_config_dir();
  void release(int wd);

  boost::asio::posix::stream_descriptor inotify_;
  boost::asio::steady_timer settle_timer_;
  Reload reload_;
  ReloadDebounce debounce_;
  std::map<int, WatchedDir> watches_;
  std::filesystem::path config_dir_;
  std::string config_file_name_;
  int config_wd_ = -1;
  int policies_wd_ = -1;
  std::map<std::filesystem::path, std::string> warned_;  // the last warning per directory
  bool running_ = false;
  alignas(8) std::array<std::byte, 16384> buffer_{};
};

}  // namespace nackguard::net
