#include "proxy/replay/replayer.hpp"

#include <algorithm>

#include "proxy/guard/header_names.hpp"
#include "proxy/replay/fingerprint.hpp"
#include "proxy/replay/rewrite.hpp"

namespace nackguard::replay {

std::string_view to_string(StopReason reason) {
  switch (reason) {
    case StopReason::queue_empty:
      return "the queue is empty";
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

Replayer::Replayer(Broker& broker, Plan plan, std::function<Clock::time_point()> now)
    : broker_(broker), plan_(plan), now_(std::move(now)) {
  if (plan_.window == 0) plan_.window = 1;
  summary_.dry_run = plan_.dry_run;
  for (const TriageKey& key : plan_.group_by) summary_.group_by.push_back(key.name());
  summary_.remaining = plan_.queued_at_start;
  if (plan_.rate && !plan_.dry_run) pacer_.emplace(*plan_.rate);
}

std::optional<StopReason> Replayer::should_stop() {
  if (interrupted()) return StopReason::interrupted;
  if (came_back_) return StopReason::came_back;
  if (plan_.limit && summary_.moved + pending_.size() >= *plan_.limit) {
    drain();  // copies in flight may still fail, and then others may take their place
    if (summary_.moved >= *plan_.limit) return StopReason::limit_reached;
  }
  if (consecutive_failures_ >= kMaxConsecutiveFailures) return StopReason::too_many_failures;
  return std::nullopt;
}

const Summary& Replayer::run(const std::function<bool()>& interrupted,
                             const std::function<void(const Summary&)>& progress) {
  interrupted_ = interrupted;
  std::optional<StopReason> stop;
  while (!(stop = should_stop())) {
    std::optional<Message> message = broker_.get();
    if (!message) {
      summary_.remaining = 0;
      stop = StopReason::queue_empty;
      break;
    }
    ++summary_.looked_at;
    summary_.remaining = message->remaining;
    handle(*message);
    settle(broker_.confirms(false));
    while (pending_.size() >= plan_.window) settle(broker_.confirms(true));
    if (progress) progress(summary_);
  }
  drain();
  if (progress) progress(summary_);
  broker_.requeue(kept_);
  summary_.requeued = kept_.size();
  kept_.clear();
  summary_.stop = stop;
  return summary_;
}

namespace {

std::int64_t returns_of(const amqp::BasicProperties& properties) {
  const amqp::FieldValue* count = header_of(properties, guard::kDeliveryCountHeader);
  return count ? count->as_int().value_or(0) : 0;
}

}  // namespace

void Replayer::keep(std::uint64_t delivery_tag, std::int64_t returns) {
  kept_.push_back(delivery_tag);
  if (returns >= kReturnsWarning) ++summary_.requeued_often;
  summary_.most_returns = std::max(summary_.most_returns, returns);
}

void Replayer::handle(Message& message) {
  const amqp::BasicProperties& properties = message.header.properties;
  const std::int64_t returns = returns_of(properties);
  if (copies_.contains(fingerprint(message.header, message.body))) {
    came_back_ = true;
    keep(message.delivery_tag, returns);
    return;
  }
  if (!selected(plan_.selection, properties)) {
    ++summary_.not_selected;
    keep(message.delivery_tag, returns);
    return;
  }
  std::vector<std::string> group = group_of(plan_.group_by, properties);
  GroupCounts& counts = summary_.groups[group];
  if (std::optional<std::int64_t> first = first_return_s(properties)) {
    counts.first_return_s = std::min(counts.first_return_s.value_or(*first), *first);
  }
  if (std::optional<std::int64_t> last = last_return_s(properties)) {
    counts.last_return_s = std::max(counts.last_return_s.value_or(*last), *last);
  }
  if (replays_of(properties) >= plan_.max_replays) {
    ++summary_.at_ceiling;
    ++counts.at_ceiling;
    summary_.ceiling_labels.push_back(label_of(properties));
    keep(message.delivery_tag, returns);
    return;
  }
  if (plan_.dry_run) {
    ++summary_.moved;
    ++counts.moved;
    keep(message.delivery_tag, returns);
    return;
  }
  move(message, std::move(group));
}

void Replayer::move(Message& message, std::vector<std::string> group) {
  amqp::ContentHeader copy = replay_copy_header(message.header);
  if (pacer_) {
    auto slot = pacer_->take(now_());
    if (slot > now_()) broker_.wait_until(slot, interrupted_);
    if (interrupted()) return keep(message.delivery_tag, returns_of(message.header.properties));
  }
  std::uint64_t seq = broker_.publish_copy(copy, message.body);
  // Recorded before the confirm: a copy may be consumed, fail and come back before that.
  copies_.insert(fingerprint(copy, message.body));
  pending_[seq] = {message.delivery_tag, returns_of(message.header.properties), std::move(group),
                   label_of(message.header.properties)};
}

void Replayer::settle(const std::vector<Confirm>& confirms) {
  for (const Confirm& confirm : confirms) {
    auto it = pending_.find(confirm.seq);
    if (it == pending_.end()) continue;
    Pending pending = std::move(it->second);
    pending_.erase(it);
    if (confirm.outcome.kind == CopyOutcome::Kind::confirmed) {
      broker_.ack(pending.delivery_tag);
      consecutive_failures_ = 0;
      ++summary_.moved;
      ++summary_.groups[pending.group].moved;
      continue;
    }
    // Not accepted (a nack, or a return: routed nowhere): the original stays in --from.
    keep(pending.delivery_tag, pending.returns);
    ++consecutive_failures_;
    ++summary_.failed;
    ++summary_.groups[pending.group].failed;
    summary_.failures.push_back({std::move(pending.label), confirm.outcome.detail});
  }
}

void Replayer::drain() {
  while (!pending_.empty()) settle(broker_.confirms(true));
}

}  // namespace nackguard::replay
