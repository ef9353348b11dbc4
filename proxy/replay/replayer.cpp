#include "proxy/replay/replayer.hpp"

#include "proxy/replay/rewrite.hpp"

namespace nackguard::replay {

namespace {

// 64-bit FNV-1a, fed field by field with a length before each so fields cannot run together.
class Fnv1a {
 public:
  void add(amqp::ByteView bytes) {
    add_u64(bytes.size());
    for (std::uint8_t b : bytes) mix(b);
  }
  void add(const std::optional<std::string>& text) {
    mix(text ? 1 : 0);
    if (text) add(amqp::as_bytes(*text));
  }
  void add_u64(std::uint64_t v) {
    for (int shift = 0; shift < 64; shift += 8) mix(static_cast<std::uint8_t>(v >> shift));
  }
  std::uint64_t value() const { return hash_; }

 private:
  void mix(std::uint8_t b) {
    hash_ ^= b;
    hash_ *= 0x100000001b3ull;
  }
  std::uint64_t hash_ = 0xcbf29ce484222325ull;
};

}  // namespace

std::string_view to_string(StopReason reason) {
  switch (reason) {
    case StopReason::queue_empty:
      return "the queue is empty";
    case StopReason::all_looked_at:
      return "every message that was in the queue at the start was looked at";
    case StopReason::limit_reached:
      return "--limit reached";
    case StopReason::came_back:
      return "a message moved in this run came back to the queue";
    case StopReason::interrupted:
      return "interrupted";
    case StopReason::too_many_failures:
      return "too many copies in a row were not accepted";
  }
  return "unknown";
}

std::uint64_t Replayer::fingerprint(const amqp::ContentHeader& header, amqp::ByteView body) {
  const amqp::BasicProperties& p = header.properties;
  Fnv1a hash;
  hash.add(p.message_id);
  hash.add(p.correlation_id);
  hash.add_u64(p.timestamp ? *p.timestamp + 1 : 0);
  hash.add_u64(static_cast<std::uint64_t>(replays_of(p)));
  hash.add(body);
  return hash.value();
}

Replayer::Replayer(Broker& broker, Plan plan, std::function<Clock::time_point()> now)
    : broker_(broker), plan_(plan), now_(std::move(now)) {
  summary_.dry_run = plan_.dry_run;
  summary_.queued_at_start = plan_.queued_at_start;
  if (plan_.rate && !plan_.dry_run) pacer_.emplace(*plan_.rate);
}

std::optional<StopReason> Replayer::should_stop(const std::function<bool()>& interrupted) const {
  if (interrupted && interrupted()) return StopReason::interrupted;
  if (came_back_) return StopReason::came_back;
  if (consecutive_failures_ >= kMaxConsecutiveFailures) return StopReason::too_many_failures;
  if (plan_.limit && summary_.moved >= *plan_.limit) return StopReason::limit_reached;
  if (summary_.looked_at >= plan_.queued_at_start) {
    return summary_.looked_at == 0 ? StopReason::queue_empty : StopReason::all_looked_at;
  }
  return std::nullopt;
}

const Summary& Replayer::run(const std::function<bool()>& interrupted,
                             const std::function<void(const Summary&)>& progress) {
  interrupted_ = interrupted;
  std::optional<StopReason> stop;
  while (!(stop = should_stop(interrupted))) {
    std::optional<Message> message = broker_.get();
    if (!message) {
      stop = StopReason::queue_empty;
      break;
    }
    ++summary_.looked_at;
    handle(*message);
    if (progress) progress(summary_);
  }
  broker_.requeue(kept_);
  summary_.requeued = kept_.size();
  kept_.clear();
  summary_.stop = stop;
  return summary_;
}

void Replayer::handle(Message& message) {
  const amqp::BasicProperties& properties = message.header.properties;
  if (copies_.contains(fingerprint(message.header, message.body))) {
    came_back_ = true;
    keep(message);
    return;
  }
  std::string reason = reason_of(properties);
  if (replays_of(properties) >= plan_.max_replays) {
    ++summary_.at_ceiling;
    ++summary_.by_reason[reason].at_ceiling;
    summary_.ceiling_labels.push_back(label_of(properties));
    keep(message);
    return;
  }
  if (plan_.dry_run) {
    ++summary_.moved;
    ++summary_.by_reason[reason].moved;
    keep(message);
    return;
  }
  move(message, reason);
}

void Replayer::move(Message& message, const std::string& reason) {
  amqp::ContentHeader copy = replay_copy_header(message.header);
  if (pacer_) {
    auto slot = pacer_->take(now_());
    if (slot > now_()) broker_.wait_until(slot, interrupted_);
    if (interrupted_ && interrupted_()) return keep(message);
  }
  CopyOutcome outcome = broker_.publish_copy(copy, message.body);
  if (outcome.kind == CopyOutcome::Kind::confirmed) {
    broker_.ack(message.delivery_tag);
    copies_.insert(fingerprint(copy, message.body));
    consecutive_failures_ = 0;
    ++summary_.moved;
    ++summary_.by_reason[reason].moved;
    return;
  }
  // The copy may or may not exist (a return means it was routed nowhere); the original stays.
  keep(message);
  ++consecutive_failures_;
  ++summary_.failed;
  ++summary_.by_reason[reason].failed;
  summary_.failures.push_back({label_of(message.header.properties), outcome.detail});
}

}  // namespace nackguard::replay
