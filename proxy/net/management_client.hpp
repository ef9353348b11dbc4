#pragma once
// Looks up the delivery limits of the queues the guard asked about (retry::LearntLimits) in
// RabbitMQ's management API (upstream.management): each second it takes the queues wanted
// then, at most kBatch, and GETs /api/queues/VHOST/NAME for each in turn over HTTP/1.1 (or
// https), with basic authentication and upstream.management.timeout per request; the
// broker's version, which the rules need, from /api/overview first. A 404 is recorded as not
// found. A failure is recorded, counted, and logged once per kind and queue until that queue's
// lookups work again, which is logged once too.

#include <boost/asio/io_context.hpp>
#include <cstddef>
#include <functional>
#include <memory>

#include "proxy/config/config.hpp"
#include "proxy/metrics/registry.hpp"
#include "proxy/retry/learnt_limits.hpp"

namespace nackguard::net {

// Loads upstream.management's https settings (its ca_file) into OpenSSL as the client will,
// so that --check-config and the start refuse a CA file OpenSSL refuses. Throws
// config::ConfigError naming the key; does nothing without upstream.management or for http.
void check_management_tls(const config::Config& config);

class ManagementClient {
 public:
  // Queues looked up per second at most.
  static constexpr std::size_t kBatch = 16;

  // Throws config::ConfigError when an https URL's ca_file does not load. `registry` may be
  // null; `steady_ms` is the clock the guard's lookups use.
  ManagementClient(boost::asio::io_context& io, const config::UpstreamManagement& api,
                   retry::LearntLimits& limits, metrics::Registry* registry,
                   std::function<std::int64_t()> steady_ms);
  ~ManagementClient();
  ManagementClient(const ManagementClient&) = delete;
  ManagementClient& operator=(const ManagementClient&) = delete;

  void start();
  // Ends the loop after the request under way, if any. Safe to call twice.
  void stop();

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace nackguard::net
