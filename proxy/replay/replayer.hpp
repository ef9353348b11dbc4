#pragma once
// The replay itself, as decisions over an abstract broker: which dead-lettered messages move,
// which stay (at the replay ceiling, in a dry run, after a failed copy), and when the run
// stops. The AMQP client is plugged in by replay_main.cpp; tests plug in a fake.
//
// No loss: an original is acked only after the broker has confirmed its copy. Copies are
// published in a window of up to Plan::window unconfirmed ones, so the run is not bound by
// one confirm's latency (a persistent message is confirmed once it is on disk).
//
// Every message is looked at once per run: a message that stays is kept unacked until the run
// ends and only then requeued, so basic.get cannot hand it out again; and the run stops at
// basic.get-empty, or when a copy made in this run comes back (dead-lettered again while the
// run goes on).

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

#include "proxy/amqp/properties.hpp"
#include "proxy/replay/pacer.hpp"
#include "proxy/replay/triage.hpp"

namespace nackguard::replay {

struct Message {
  std::uint64_t delivery_tag = 0;
  std::uint32_t remaining = 0;  // left in --from after this one (basic.get-ok's message_count)
  amqp::ContentHeader header;
  amqp::Bytes body;
};

struct CopyOutcome {
  enum class Kind { confirmed, nacked, returned };
  Kind kind = Kind::confirmed;
  std::string detail;
};

struct Confirm {
  std::uint64_t seq = 0;  // as returned by Broker::publish_copy
  CopyOutcome outcome;
};

// The broker as the replay sees it: --from and --to are bound in.
class Broker {
 public:
  using Clock = std::chrono::steady_clock;
  virtual ~Broker() = default;
  // basic.get on --from without auto-ack; nullopt when it is empty.
  virtual std::optional<Message> get() = 0;
  // Publishes the copy to --to (mandatory) without waiting; returns its sequence number.
  virtual std::uint64_t publish_copy(const amqp::ContentHeader& header, amqp::ByteView body) = 0;
  // The copies settled since the last call; with `wait`, blocks until there is at least one
  // (when any is outstanding).
  virtual std::vector<Confirm> confirms(bool wait) = 0;
  virtual void ack(std::uint64_t delivery_tag) = 0;
  // basic.nack(requeue=true) of each tag.
  virtual void requeue(std::span<const std::uint64_t> delivery_tags) = 0;
  // Waits (keeping the connection alive) until `until`, or until `stop` says so.
  virtual void wait_until(Clock::time_point until, const std::function<bool()>& stop) = 0;
};

inline constexpr std::size_t kConfirmWindow = 128;

struct Plan {
  std::uint64_t queued_at_start = 0;  // ready messages in --from at the start (for progress)
  std::optional<std::uint64_t> limit;
  std::optional<double> rate;
  std::int64_t max_replays = 3;
  bool dry_run = false;
  std::size_t window = kConfirmWindow;  // unconfirmed copies at most
  // Messages outside it stay in --from, untouched and in their order (a dry run counts
  // exactly what a real run with the same selection moves).
  Selection selection;
  std::vector<TriageKey> group_by{TriageKey{TriageKey::Kind::reason, {}}};
};

enum class StopReason {
  queue_empty,        // basic.get-empty
  limit_reached,      // --limit messages moved (or would move, in a dry run)
  came_back,          // a copy made in this run was dead-lettered again
  interrupted,        // SIGINT or SIGTERM
  too_many_failures,  // kMaxConsecutiveFailures copies in a row were not accepted
};
std::string_view to_string(StopReason reason);

inline constexpr std::uint64_t kMaxConsecutiveFailures = 5;

// A message requeued into --from with an x-delivery-count this high is reported: a quorum
// queue on RabbitMQ 4.0 to 4.2 drops a message returned more often than its delivery limit
// (20 unless set) when it has no dead-letter exchange, and each run that leaves a message in
// place (a dry run, --where, the ceiling) returns it once more.
inline constexpr std::int64_t kReturnsWarning = 10;

struct GroupCounts {
  std::uint64_t moved = 0;  // or would move, in a dry run
  std::uint64_t at_ceiling = 0;
  std::uint64_t failed = 0;
  // The earliest x-nackguard-first-return and the latest x-nackguard-last-return of the
  // group's messages (epoch seconds), when they carry them.
  std::optional<std::int64_t> first_return_s;
  std::optional<std::int64_t> last_return_s;
};

struct Failed {
  std::string label;  // message_id
  std::string why;
};

struct Summary {
  bool dry_run = false;
  std::uint64_t looked_at = 0;
  std::uint64_t remaining = 0;  // ready in --from after the last get: for the progress bar
  std::uint64_t moved = 0;      // or would move, in a dry run
  std::uint64_t at_ceiling = 0;
  std::uint64_t failed = 0;
  std::uint64_t requeued = 0;         // originals given back to --from at the end
  std::uint64_t requeued_often = 0;   // of those, with x-delivery-count >= kReturnsWarning
  std::int64_t most_returns = 0;      // the highest x-delivery-count among those requeued
  std::uint64_t not_selected = 0;     // outside the selection: left in --from, untouched
  std::vector<std::string> group_by;  // the names of Plan::group_by's keys
  // By the values of Plan::group_by's keys, in their order (x-nackguard-reason by default).
  std::map<std::vector<std::string>, GroupCounts> groups;
  std::vector<std::string> ceiling_labels;  // message ids of those left at the ceiling
  std::vector<Failed> failures;
  std::optional<StopReason> stop;  // unset while running, or when the run broke off
};

class Replayer {
 public:
  using Clock = std::chrono::steady_clock;

  Replayer(Broker& broker, Plan plan, std::function<Clock::time_point()> now = Clock::now);

  // Runs until one of the StopReasons, then requeues every message it kept. `interrupted` is
  // polled between messages; `progress` is called after each message. Exceptions from the
  // broker propagate; summary() then tells what was done until then (the broker requeues
  // what is unacked when the connection goes).
  const Summary& run(const std::function<bool()>& interrupted = {},
                     const std::function<void(const Summary&)>& progress = {});
  const Summary& summary() const { return summary_; }

 private:
  struct Pending {
    std::uint64_t delivery_tag = 0;  // of the original
    std::int64_t returns = 0;        // its x-delivery-count
    std::vector<std::string> group;
    std::string label;
  };

  std::optional<StopReason> should_stop();
  void handle(Message& message);
  void move(Message& message, std::vector<std::string> group);
  void settle(const std::vector<Confirm>& confirms);
  void drain();
  // To be requeued at the end; `returns` is the message's x-delivery-count.
  void keep(std::uint64_t delivery_tag, std::int64_t returns);
  bool interrupted() const { return interrupted_ && interrupted_(); }

  Broker& broker_;
  Plan plan_;
  std::function<Clock::time_point()> now_;
  std::function<bool()> interrupted_;
  Summary summary_;
  std::vector<std::uint64_t> kept_;           // originals to requeue at the end
  std::map<std::uint64_t, Pending> pending_;  // unconfirmed copies, by sequence number
  std::unordered_set<std::uint64_t> copies_;  // fingerprints of the copies made in this run
  std::uint64_t consecutive_failures_ = 0;
  bool came_back_ = false;
  std::optional<RatePacer> pacer_;
};

}  // namespace nackguard::replay
