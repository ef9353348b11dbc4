#include "proxy/status/queue_window.hpp"

#include <algorithm>

namespace nackguard::status {

QueueWindow::QueueWindow(std::int64_t started_ms, std::chrono::milliseconds window,
                         std::chrono::milliseconds step)
    : started_ms_(started_ms), window_ms_(window.count()), step_ms_(step.count()) {}

void QueueWindow::observe(std::int64_t now_ms, const std::vector<QueueCounts>& counts) {
  if (!snapshots_.empty() && now_ms - snapshots_.back().at_ms < step_ms_) return;
  Snapshot snapshot;
  snapshot.at_ms = now_ms;
  std::vector<const QueueCounts*> busiest;
  for (const QueueCounts& queue : counts) busiest.push_back(&queue);
  if (busiest.size() > kMaxWindowQueues) {
    std::nth_element(busiest.begin(), busiest.begin() + kMaxWindowQueues, busiest.end(),
                     [](const QueueCounts* a, const QueueCounts* b) {
                       return a->returns + a->deliveries > b->returns + b->deliveries;
                     });
    busiest.resize(kMaxWindowQueues);
    snapshot.complete = false;
  }
  for (const QueueCounts* queue : busiest) snapshot.queues.emplace(queue->queue, *queue);
  snapshots_.push_back(std::move(snapshot));
  // Keep one snapshot older than the window's start: the baseline until a newer one is.
  while (snapshots_.size() > 1 && now_ms - snapshots_[1].at_ms >= window_ms_) {
    snapshots_.pop_front();
  }
}

const QueueWindow::Snapshot* QueueWindow::baseline(std::int64_t now_ms) const {
  for (const Snapshot& snapshot : snapshots_) {
    if (now_ms - snapshot.at_ms <= window_ms_) return &snapshot;
  }
  return nullptr;
}

std::int64_t QueueWindow::seconds(std::int64_t now_ms) const {
  const Snapshot* base = baseline(now_ms);
  return (now_ms - (base != nullptr ? base->at_ms : started_ms_)) / 1000;
}

std::optional<QueueCounts> QueueWindow::delta(std::int64_t now_ms,
                                              const QueueCounts& current) const {
  const Snapshot* base = baseline(now_ms);
  if (base == nullptr) return current;  // no snapshot within the window: since start
  auto found = base->queues.find(current.queue);
  if (found == base->queues.end()) {
    if (!base->complete) return std::nullopt;
    return current;  // a queue first seen after the baseline
  }
  const QueueCounts& then = found->second;
  QueueCounts out = current;
  auto minus = [](std::uint64_t now, std::uint64_t before) { return now - before; };
  out.deliveries = minus(current.deliveries, then.deliveries);
  out.returns = minus(current.returns, then.returns);
  for (std::size_t i = 0; i < out.requeues.size(); ++i) {
    out.requeues[i] = minus(current.requeues[i], then.requeues[i]);
  }
  for (std::size_t i = 0; i < out.dead_letters.size(); ++i) {
    out.dead_letters[i] = minus(current.dead_letters[i], then.dead_letters[i]);
  }
  out.fallbacks = minus(current.fallbacks, then.fallbacks);
  out.ack_timeouts = minus(current.ack_timeouts, then.ack_timeouts);
  return out;
}

}  // namespace nackguard::status
