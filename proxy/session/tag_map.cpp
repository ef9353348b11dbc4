#include "proxy/session/tag_map.hpp"

#include <iterator>

namespace nackguard::session {

bool TagMap::note_untracked(std::uint64_t client_tag, std::uint64_t broker_tag, bool* new_run) {
  *new_run = false;
  const std::uint64_t offset = broker_tag - client_tag;
  if (run_open_ && !runs_.empty()) {
    Run& last = std::prev(runs_.end())->second;
    if (last.offset == offset) {  // recorded ones between have that offset too
      last.last_client_tag = client_tag;
      return true;
    }
  }
  if (runs_.size() >= kMaxRuns) return false;
  runs_.emplace(client_tag, Run{client_tag, offset});
  *new_run = true;
  run_open_ = true;
  return true;
}

void TagMap::note_handed_out(std::uint64_t client_tag, std::uint64_t broker_tag) {
  if (broker_tag < highest_handed_out_) reordered_ = true;
  if (broker_tag > highest_handed_out_) highest_handed_out_ = broker_tag;
  // A recorded delivery in the middle of a run is mapped by its record while it has one, and
  // by the run afterwards, which is right only if it has the run's offset.
  if (run_open_ && !runs_.empty() &&
      std::prev(runs_.end())->second.offset != broker_tag - client_tag) {
    run_open_ = false;
  }
}

std::optional<std::uint64_t> TagMap::run_broker_tag(std::uint64_t tag) const {
  // Within a run every client tag has the run's offset, untracked or not.
  auto it = runs_.upper_bound(tag);
  if (tag == 0 || it == runs_.begin()) return std::nullopt;
  const Run& run = std::prev(it)->second;
  if (tag > run.last_client_tag) return std::nullopt;
  return tag + run.offset;
}

bool TagMap::run_starts_below(std::uint64_t broker_tag) const {
  for (const auto& [first, run] : runs_) {
    if (first + run.offset < broker_tag) return true;
  }
  return false;
}

}  // namespace nackguard::session
