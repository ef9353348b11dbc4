#include "proxy/metrics/metrics_listener.hpp"

namespace nackguard::metrics {

void MetricsListener::on_delivery(std::string_view queue) {
  registry_.delivery(queue);
  if (next_) next_->on_delivery(queue);
}

void MetricsListener::on_return(std::string_view queue) {
  registry_.returned(queue);
  if (next_) next_->on_return(queue);
}

void MetricsListener::on_requeue(std::string_view queue, retry::Action action) {
  registry_.requeue(queue, action);
  if (next_) next_->on_requeue(queue, action);
}

void MetricsListener::on_dead_letter(std::string_view queue, std::string_view identity,
                                     std::uint32_t returns, retry::DeadLetterReason reason) {
  registry_.dead_letter(queue, reason, returns);
  if (next_) next_->on_dead_letter(queue, identity, returns, reason);
}

void MetricsListener::on_fallback(std::string_view queue, retry::Fallback fallback,
                                  std::string_view detail) {
  registry_.fallback(queue, fallback);
  if (next_) next_->on_fallback(queue, fallback, detail);
}

void MetricsListener::on_outage(std::string_view queue, bool started, double ratio) {
  registry_.outage(queue, started);
  if (next_) next_->on_outage(queue, started, ratio);
}

void MetricsListener::on_ack_timeout(std::string_view queue, std::string_view identity,
                                     std::int64_t held_ms) {
  registry_.ack_timeout(queue);
  if (next_) next_->on_ack_timeout(queue, identity, held_ms);
}

void MetricsListener::on_notice(std::string_view queue, std::string_view what) {
  if (next_) next_->on_notice(queue, what);
}

void watch_guard_context(Registry& registry, retry::GuardContext& context) {
  retry::Tracker& tracker = context.tracker();
  retry::BodyBudget& budget = context.budget();
  registry.set_source(Metric::tracker_entries,
                      [&tracker] { return static_cast<double>(tracker.stats().entries); });
  registry.set_source(Metric::tracker_evictions_total,
                      [&tracker] { return static_cast<double>(tracker.stats().evictions); });
  registry.set_source(Metric::tracker_expiries_total,
                      [&tracker] { return static_cast<double>(tracker.stats().expiries); });
  retry::QueueHealth& health = context.health();
  registry.set_source(Metric::outage_messages,
                      [&health] { return static_cast<double>(health.stats().messages); });
  registry.set_source(Metric::outage_messages_dropped_total,
                      [&health] { return static_cast<double>(health.stats().messages_dropped); });
  registry.set_source(Metric::outage_max_reached_total,
                      [&health] { return static_cast<double>(health.stats().max_outage_reached); });
  retry::QueueFactsRegistry& facts = context.queue_facts();
  registry.set_source(Metric::queue_facts, [&facts] { return static_cast<double>(facts.size()); });
  registry.set_source(Metric::queue_facts_forgotten_total,
                      [&facts] { return static_cast<double>(facts.forgotten()); });
  retry::LearntLimits& limits = context.learnt_limits();
  registry.set_source(Metric::management_limits_known,
                      [&limits] { return static_cast<double>(limits.known()); });
  registry.set_source(Metric::management_limits_forgotten_total,
                      [&limits] { return static_cast<double>(limits.forgotten()); });
  registry.set_source(Metric::retained_body_bytes,
                      [&budget] { return static_cast<double>(budget.used()); });
  registry.set_source(Metric::retained_body_bytes_limit,
                      [&budget] { return static_cast<double>(budget.limit()); });
}

}  // namespace nackguard::metrics
