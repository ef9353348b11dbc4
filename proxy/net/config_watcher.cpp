#include "proxy/net/config_watcher.hpp"

#include <spdlog/spdlog.h>
#include <sys/inotify.h>

#include <boost/asio/buffer.hpp>
#include <cerrno>
#include <cstring>
#include <span>
#include <utility>

namespace nackguard::net {
namespace {

namespace fs = std::filesystem;

// Editors and kubelet change a file in a few steps within milliseconds; 300 ms of quiet takes
// them as one change, and the cap keeps a steady trickle from putting the reload off forever.
constexpr auto kQuiet = std::chrono::milliseconds(300);
constexpr auto kLongestWait = std::chrono::milliseconds(1000);

std::string why_not_watched(int error) {
  switch (error) {
    case ENOENT:
      return "it does not exist";
    case ENOTDIR:
      return "it is not a directory";
    case ENOSPC:
      return "the inotify watch limit is reached (raise the sysctl fs.inotify.max_user_watches)";
    case EMFILE:
      return "the inotify instance limit is reached (raise the sysctl "
             "fs.inotify.max_user_instances)";
    default:
      return std::strerror(error);
  }
}

}  // namespace

ConfigWatcher::ConfigWatcher(boost::asio::any_io_executor executor, Reload reload)
    : inotify_(executor),
      settle_timer_(executor),
      reload_(std::move(reload)),
      debounce_(kQuiet, kLongestWait) {}

void ConfigWatcher::start(const fs::path& config_file, const fs::path& policies_dir) {
  const int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd < 0) {
    spdlog::warn(
        "cannot watch {} and {} for changes: inotify_init1: {}; changes are not picked up by "
        "themselves, SIGHUP still reloads",
        config_file.string(), policies_dir.string(), why_not_watched(errno));
    return;
  }
  inotify_.assign(fd);
  running_ = true;
  config_dir_ = config_file.parent_path();
  config_file_name_ = config_file.filename().string();
  follow(policies_dir);
  read_events();
}

void ConfigWatcher::follow(const fs::path& policies_dir) {
  if (!running_) return;
  watch_config_dir();
  const int wd = add_watch(policies_dir);
  const int old = std::exchange(policies_wd_, wd);
  if (old >= 0 && old != wd) {
    watches_[old].holds_policies = false;
    release(old);
  }
  if (wd < 0) return;
  WatchedDir& dir = watches_[wd];
  if (wd != config_wd_) dir.path = policies_dir;
  dir.holds_policies = true;
}

void ConfigWatcher::watch_config_dir() {
  const int wd = add_watch(config_dir_);
  const int old = std::exchange(config_wd_, wd);
  if (old >= 0 && old != wd) {
    watches_[old].config_file_name.clear();
    release(old);
  }
  if (wd < 0) return;
  WatchedDir& dir = watches_[wd];
  dir.path = config_dir_;
  dir.config_file_name = config_file_name_;
}

int ConfigWatcher::add_watch(const fs::path& dir) {
  const int wd = inotify_add_watch(inotify_.native_handle(), dir.c_str(), watch_mask());
  if (wd >= 0) {
    warned_.erase(dir);
    return wd;
  }
  // Said once per directory and cause: follow() tries again after every reload.
  const std::string why = why_not_watched(errno);
  std::string& last = warned_[dir];
  if (last != why) {
    last = why;
    spdlog::warn(
        "cannot watch {} for changes: {}; changes there are not picked up by themselves, "
        "SIGHUP still reloads",
        dir.string(), why);
  }
  return -1;
}

// Stops watching `wd` once it has no role left.
void ConfigWatcher::release(int wd) {
  auto it = watches_.find(wd);
  if (it == watches_.end() || it->second.holds_policies || !it->second.config_file_name.empty())
    return;
  watches_.erase(it);
  inotify_rm_watch(inotify_.native_handle(), wd);
}

void ConfigWatcher::cancel() {
  running_ = false;
  settle_timer_.cancel();
  boost::system::error_code ignored;
  inotify_.close(ignored);  // removes every watch
}

void ConfigWatcher::read_events() {
  inotify_.async_read_some(
      boost::asio::buffer(buffer_), [this](const boost::system::error_code& ec, std::size_t bytes) {
        if (!running_ || ec == boost::asio::error::operation_aborted) return;
        if (ec) {
          spdlog::warn(
              "reading inotify events failed: {}; changes to {} and the policies are no longer "
              "picked up by themselves, SIGHUP still reloads",
              ec.message(), (config_dir_ / config_file_name_).string());
          return;
        }
        on_events(bytes);
        read_events();
      });
}

void ConfigWatcher::on_events(std::size_t bytes) {
  const std::span<const std::byte> read(buffer_.data(), bytes);
  for (const InotifyEvent& event : parse_inotify_events(read)) {
    auto it = watches_.find(event.wd);
    const EventMeaning meaning = interpret(event, it == watches_.end() ? nullptr : &it->second);
    if (meaning.kind == EventMeaning::Kind::watch_gone) {
      // The kernel removed the watch (the directory went): the reload's follow() adds it
      // again where the path leads now.
      watches_.erase(it);
      if (policies_wd_ == event.wd) policies_wd_ = -1;
      if (config_wd_ == event.wd) config_wd_ = -1;
    }
    on_change(meaning);
  }
}

void ConfigWatcher::on_change(const EventMeaning& meaning) {
  const auto now = ReloadDebounce::Clock::now();
  switch (meaning.kind) {
    case EventMeaning::Kind::ignore:
      return;
    case EventMeaning::Kind::changed:
      debounce_.note(meaning.path.string(), now);
      break;
    case EventMeaning::Kind::watch_gone:
      spdlog::debug("{} was removed or replaced; watching its path again after the reload",
                    meaning.path.string());
      debounce_.note(meaning.path.string(), now);
      break;
    case EventMeaning::Kind::overflow:
      debounce_.note("a watched file (inotify's event queue overflowed)", now);
      break;
  }
  wait_for_quiet();
}

void ConfigWatcher::wait_for_quiet() {
  const std::optional<ReloadDebounce::Clock::time_point> due = debounce_.deadline();
  if (!due) return;
  settle_timer_.expires_at(*due);
  settle_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || !running_) return;
    if (std::optional<std::string> what = debounce_.take_due(ReloadDebounce::Clock::now())) {
      reload_(*what);
    } else {
      wait_for_quiet();
    }
  });
}

}  // namespace nackguard::net
