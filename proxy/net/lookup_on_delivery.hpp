#pragma once
// TEMPORARY hook, until the guard looks delivery limits up itself: on each delivery the guard
// reports, asks retry::LearntLimits for the queue's limit, so that the management API client
// looks it up and /status shows it. The guard's listener knows no vhost, so this asks for the
// queue in the default vhost "/" only. Remove it once the guard calls
// GuardContext::learnt_limits().lookup(vhost, queue, steady_ms()) with its connection's vhost.

#include "proxy/metrics/metrics_listener.hpp"

namespace nackguard::net {

class LookupOnDelivery : public metrics::MetricsListener {
 public:
  using MetricsListener::MetricsListener;

  // Before any connection: the context's limits are asked from then on.
  void attach(retry::GuardContext& context) { context_ = &context; }

  void on_delivery(std::string_view queue) override {
    MetricsListener::on_delivery(queue);
    if (context_ != nullptr) context_->learnt_limits().lookup("/", queue, context_->steady_ms());
  }

 private:
  retry::GuardContext* context_ = nullptr;
};

}  // namespace nackguard::net
