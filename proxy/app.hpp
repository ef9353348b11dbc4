#pragma once
// The running proxy: the shared guard state, the listener, worker threads, and signals
// (SIGHUP, or a change to a watched file, reloads the policies; SIGTERM and SIGINT drain, a
// second one exits at once).

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <memory>
#include <optional>
#include <string>

#include "proxy/config/config.hpp"
#include "proxy/metrics/http_server.hpp"
#include "proxy/metrics/metrics_listener.hpp"
#include "proxy/metrics/registry.hpp"
#include "proxy/net/config_watcher.hpp"
#include "proxy/net/log_listener.hpp"
#include "proxy/net/management_client.hpp"
#include "proxy/net/server.hpp"
#include "proxy/retry/guard_context.hpp"
#include "proxy/retry/policy_set.hpp"
#include "proxy/status/status_board.hpp"

namespace nackguard {

class App {
 public:
  App(config::Config config, retry::PolicySet policies);
  // Runs until drained after a signal; returns the process's exit code.
  int run();

 private:
  void wait_for_stop();
  void wait_for_reload();
  void reload();
  // Records a reload's outcome for /status (and, when it loaded, the config it shows).
  void record_reload(bool ok, const std::string& message);
  void tick_status();
  void watch_files();
  void begin_shutdown(int signal);
  void watch_drain();

  std::optional<std::string> not_ready_reason() const;

  config::Config config_;
  net::LogListener log_listener_;
  metrics::Registry registry_;
  metrics::MetricsListener metrics_listener_;
  retry::GuardContext guard_;
  boost::asio::io_context io_;
  std::unique_ptr<net::Server> server_;
  std::unique_ptr<status::StatusBoard> status_;
  std::unique_ptr<metrics::HttpServer> metrics_server_;
  // Looks delivery limits up in RabbitMQ's management API; null without upstream.management.
  std::unique_ptr<net::ManagementClient> management_;
  // The signal handlers and the drain watch run on it, one at a time: reload writes config_
  // while begin_shutdown reads it, and io_ runs on several threads.
  boost::asio::strand<boost::asio::io_context::executor_type> signals_strand_;
  boost::asio::signal_set stop_signals_;
  boost::asio::signal_set reload_signal_;
  boost::asio::steady_timer drain_timer_;
  boost::asio::steady_timer status_timer_;  // takes /status's window snapshots
  // Reloads on a change to the config file or a policy file; null with reload.watch false.
  std::unique_ptr<net::ConfigWatcher> config_watcher_;
  std::atomic<bool> shutting_down_{false};
};

}  // namespace nackguard
