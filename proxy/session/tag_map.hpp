#pragma once
// One channel's delivery tags: the broker's sequence and the client's. They are the same until
// the proxy takes over or holds back a delivery; from then on the client's tags are numbered
// without the gaps. A delivery with a record (ChannelState's) maps by its record; one handed
// out untracked (the body budget was full) maps by a run: client tags whose broker tag is the
// client tag plus the same offset. Pure bookkeeping, no frames.

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>

namespace nackguard::session {

class TagMap {
 public:
  // Assigns the next client tag to a delivery the client will see.
  std::uint64_t next_client_tag() { return ++last_client_tag_; }
  std::uint64_t last_client_tag() const { return last_client_tag_; }
  void note_broker_tag(std::uint64_t tag) {
    if (tag > last_broker_tag_) last_broker_tag_ = tag;
  }
  // While the proxy never took over or held back a delivery on the channel, the two
  // sequences are identical and frames carrying tags are forwarded as their original bytes.
  bool identical() const { return !ever_owned_; }
  void note_owned() { ever_owned_ = true; }

  // A delivery handed out untracked: extends the last run or starts one. False if it would
  // start run kMaxRuns + 1. `*new_run` says whether a run was started (it costs kRunBytes).
  bool note_untracked(std::uint64_t client_tag, std::uint64_t broker_tag, bool* new_run);
  static constexpr std::size_t kMaxRuns = 1024;
  static constexpr std::uint64_t kRunBytes = 32 + 8 + 16 + 16;  // a run's map node
  // A delivery handed to the client. One handed out after a later broker tag (released from
  // held_back after another passed it) means that a broker tag no longer tells which client
  // tags lie below it. One with another offset than the last run ends that run.
  void note_handed_out(std::uint64_t client_tag, std::uint64_t broker_tag);
  // The broker tag of client tag `tag` by the run it falls in, if any (whether it has a record
  // instead is the caller's to check).
  std::optional<std::uint64_t> run_broker_tag(std::uint64_t tag) const;
  bool has_runs() const { return !runs_.empty(); }
  // Whether a run's first delivery has a broker tag below `broker_tag`.
  bool run_starts_below(std::uint64_t broker_tag) const;
  // Whether deliveries were handed out out of broker-tag order.
  bool reordered() const { return reordered_; }

 private:
  struct Run {
    std::uint64_t last_client_tag = 0;
    std::uint64_t offset = 0;  // broker tag minus client tag, modulo 2^64
  };
  std::map<std::uint64_t, Run> runs_;  // by first client tag
  bool run_open_ = false;              // the next untracked delivery may extend the last run
  std::uint64_t highest_handed_out_ = 0;
  bool reordered_ = false;
  std::uint64_t last_client_tag_ = 0;
  std::uint64_t last_broker_tag_ = 0;
  bool ever_owned_ = false;
};

}  // namespace nackguard::session
