#include "proxy/net/watch_rules.hpp"

#include <sys/inotify.h>

#include <algorithm>
#include <cstring>

#include "proxy/config/policy_loader.hpp"

namespace nackguard::net {

std::vector<InotifyEvent> parse_inotify_events(std::span<const std::byte> bytes) {
  std::vector<InotifyEvent> events;
  std::size_t offset = 0;
  while (sizeof(inotify_event) <= bytes.size() - offset) {
    inotify_event header;
    std::memcpy(&header, bytes.data() + offset, sizeof header);
    offset += sizeof header;
    if (header.len > bytes.size() - offset) break;
    InotifyEvent event{header.wd, header.mask, {}};
    const char* name = reinterpret_cast<const char*>(bytes.data() + offset);
    // The name is padded with NULs up to `len`.
    event.name.assign(name, strnlen(name, header.len));
    offset += header.len;
    events.push_back(std::move(event));
  }
  return events;
}

std::uint32_t watch_mask() {
  return IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE | IN_DELETE | IN_ONLYDIR;
}

EventMeaning interpret(const InotifyEvent& event, const WatchedDir* dir) {
  using Kind = EventMeaning::Kind;
  if ((event.mask & IN_Q_OVERFLOW) != 0) return {Kind::overflow, {}};
  if (dir == nullptr) return {};
  if ((event.mask & IN_IGNORED) != 0) return {Kind::watch_gone, dir->path};
  // A subdirectory is never read (ConfigMap's ..<timestamp> directories, examples/).
  if ((event.mask & IN_ISDIR) != 0 || event.name.empty()) return {};
  const bool relevant = event.name == kConfigMapDataLink ||
                        (!dir->config_file_name.empty() && event.name == dir->config_file_name) ||
                        (dir->holds_policies && config::is_policy_file_name(event.name));
  if (!relevant) return {};
  return {Kind::changed, dir->path / event.name};
}

ReloadDebounce::ReloadDebounce(Clock::duration quiet, Clock::duration longest_wait)
    : quiet_(quiet), longest_wait_(longest_wait) {}

void ReloadDebounce::note(const std::string& what, Clock::time_point now) {
  if (!first_) first_ = now;
  last_ = now;
  if (std::find(changed_.begin(), changed_.end(), what) == changed_.end()) {
    changed_.push_back(what);
  }
}

std::optional<ReloadDebounce::Clock::time_point> ReloadDebounce::deadline() const {
  if (!first_) return std::nullopt;
  return std::min(last_ + quiet_, *first_ + longest_wait_);
}

std::optional<std::string> ReloadDebounce::take_due(Clock::time_point now) {
  const std::optional<Clock::time_point> due = deadline();
  if (!due || now < *due) return std::nullopt;
  std::string what = changed_.front();
  if (changed_.size() > 1) {
    what += " (and " + std::to_string(changed_.size() - 1) + " more)";
  }
  first_.reset();
  changed_.clear();
  return what;
}

}  // namespace nackguard::net
