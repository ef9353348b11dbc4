#pragma once
// What the config watcher (config_watcher.hpp) decides without inotify or Asio: what an
// inotify event in a watched directory means for nackguard, and when a burst of changes has
// settled enough to reload.
//
// Words: a watched directory is the config file's directory, policies_dir, or one directory
// that is both. A change is an event that calls for a reload; the reload starts once the
// changes settle (no new one for `quiet`, or `longest_wait` after the first).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace nackguard::net {

// One record of what read(2) returns on an inotify descriptor.
struct InotifyEvent {
  int wd = -1;
  std::uint32_t mask = 0;
  std::string name;  // empty for an event about the watched directory itself
};

// The records in `bytes`, in order. A record cut short at the end is dropped (the kernel
// never cuts one, but a bad length must not read past the buffer).
std::vector<InotifyEvent> parse_inotify_events(std::span<const std::byte> bytes);

// The symbolic link through which a Kubernetes ConfigMap volume shows its current version:
// kubelet writes a new ..<timestamp> directory, points ..data_tmp at it and renames that over
// ..data, so one IN_MOVED_TO of ..data stands for every file of the volume.
inline constexpr std::string_view kConfigMapDataLink = "..data";

struct WatchedDir {
  std::filesystem::path path;
  std::string config_file_name;  // set when this is the config file's directory
  bool holds_policies = false;   // this is policies_dir
};

// What an event means for the reload.
struct EventMeaning {
  enum class Kind {
    ignore,      // not a file nackguard reads (a swap file, ConfigMap's ..<timestamp> dirs)
    changed,     // `path` changed: reload
    watch_gone,  // the directory `path` was removed or unmounted: its watch is gone; reload
    overflow,    // the kernel dropped events: something may have changed; reload
  };
  Kind kind = Kind::ignore;
  std::filesystem::path path;
};

// The events a directory is watched for: a file written in place (closed after writing),
// renamed over, created (a symbolic link), removed or renamed away.
std::uint32_t watch_mask();

// `dir` is the watched directory the event's wd belongs to; nullptr for a wd no longer
// watched (the late events of a watch nackguard removed itself).
EventMeaning interpret(const InotifyEvent& event, const WatchedDir* dir);

// Merges a burst of changes into one reload.
class ReloadDebounce {
 public:
  using Clock = std::chrono::steady_clock;

  ReloadDebounce(Clock::duration quiet, Clock::duration longest_wait);

  // Records that `what` (a path, for the log line) changed at `now`.
  void note(const std::string& what, Clock::time_point now);
  // When the pending changes settle; nullopt when none is pending.
  std::optional<Clock::time_point> deadline() const;
  // At or after the deadline: what changed, for "reload: {} changed; reloading" (the first
  // path, and how many more), and nothing is pending any more. nullopt before it.
  std::optional<std::string> take_due(Clock::time_point now);

 private:
  Clock::duration quiet_;
  Clock::duration longest_wait_;
  std::optional<Clock::time_point> first_;
  Clock::time_point last_{};
  std::vector<std::string> changed_;  // distinct, in the order first seen
};

}  // namespace nackguard::net
