#include "proxy/app.hpp"

#include <spdlog/spdlog.h>

#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <thread>
#include <vector>

#include "nackguard/version.hpp"
#include "proxy/config/policy_loader.hpp"
#include "proxy/net/io_threads.hpp"
#include "proxy/status/status_page.hpp"

namespace nackguard {

namespace {

// This machine's name: in Kubernetes, the pod's name. Empty if it cannot be read.
std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return {};
  return name;
}

retry::GuardSettings guard_settings(const config::Config& cfg) {
  retry::GuardSettings settings;
  settings.tracker_max_entries = cfg.tracker_max_entries;
  settings.tracker_idle_ttl = cfg.tracker_idle_ttl;
  settings.retained_body_bytes = cfg.retained_body_bytes;
  settings.host_name = host_name();
  if (cfg.upstream_management) settings.learnt_limits_refresh = cfg.upstream_management->refresh;
  return settings;
}

// "a:5672, b:5672": the broker addresses, for log lines.
std::string upstream_list(const config::Config& cfg) {
  std::string out;
  for (const config::Endpoint& address : config::upstream_targets(cfg)) {
    if (!out.empty()) out += ", ";
    out += config::to_string(address);
  }
  return out;
}

metrics::RegistryOptions registry_options(const config::Config& cfg) {
  metrics::RegistryOptions options;
  options.version = kVersion;
  options.max_queue_labels = cfg.metrics_max_queue_labels;
  options.upstream_addresses.clear();
  for (const config::Endpoint& address : config::upstream_targets(cfg)) {
    options.upstream_addresses.push_back(config::to_string(address));
  }
  return options;
}

net::RelayOptions relay_options(const config::Config& cfg, retry::GuardContext& guard) {
  net::RelayOptions options;
  options.upstreams = std::make_shared<net::Upstreams>(
      config::upstream_targets(cfg),
      cfg.upstream_addresses.empty() ? "upstream.host" : "upstream.addresses");
  options.connect_timeout = cfg.upstream_connect_timeout;
  options.handshake_timeout = cfg.handshake_timeout;
  options.tls = net::load_tls(cfg);
  if (cfg.listen_tls) {
    spdlog::info("clients must connect with TLS (certificate {}; client certificates {})",
                 cfg.listen_tls->cert_file.path.string(),
                 cfg.listen_tls->require_client_cert ? "required"
                 : cfg.listen_tls->ca_file.empty()   ? "not asked for"
                                                     : "verified when presented");
  }
  if (cfg.upstream_tls) {
    spdlog::info(
        "connecting to the broker with TLS ({}{})",
        cfg.upstream_tls->verify
            ? "its certificate verified for " + (cfg.upstream_tls->server_name.empty()
                                                     ? std::string("each address's host name")
                                                     : cfg.upstream_tls->server_name)
            : std::string("its certificate NOT verified: upstream.tls.verify is false"),
        cfg.upstream_tls->cert_file.empty() ? "" : "; presenting a client certificate");
  }
  options.buffer_bytes = cfg.buffer_bytes;
  options.one_thread = cfg.threads == 1;
  options.session.max_frame_bytes = cfg.max_frame_bytes;
  options.session.body_budget = &guard.budget();
  options.guard_context = &guard;
  return options;
}

status::StatusConfig status_config(const config::Config& cfg, std::size_t policies) {
  status::StatusConfig out;
  out.file = cfg.file.string();
  out.policies_dir = cfg.policies_dir.string();
  out.policies = policies;
  out.show_identities = cfg.metrics_show_identities;
  out.max_queue_labels = cfg.metrics_max_queue_labels;
  return out;
}

// What the TLS keys say, as one string to compare across a reload.
std::string tls_signature(const config::Config& cfg) {
  std::string out;
  if (const auto& tls = cfg.listen_tls) {
    out += "listen:" + tls->cert_file.path.string() + "|" + tls->key_file.path.string() + "|" +
           tls->ca_file.path.string() + (tls->require_client_cert ? "|required" : "|optional");
  }
  if (const auto& tls = cfg.upstream_tls) {
    out += " upstream:" + tls->ca_file.path.string() + "|" + tls->cert_file.path.string() + "|" +
           tls->key_file.path.string() + "|" + tls->server_name + (tls->verify ? "|verify" : "");
  }
  return out;
}

// What upstream.management says, as one string to compare across a reload (the password too:
// a changed password file is read again only by a restart).
std::string management_signature(const config::Config& cfg) {
  const auto& api = cfg.upstream_management;
  if (!api) return {};
  return api->url + "|" + api->username + "|" + api->password + "|" +
         std::to_string(api->refresh.count()) + "|" + std::to_string(api->timeout.count()) + "|" +
         (api->verify ? "verify|" : "|") + api->ca_file.path.string();
}

// Keys a reload cannot apply: they shape sockets, threads and memory set up at start.
std::vector<std::string> keys_needing_restart(const config::Config& now,
                                              const config::Config& loaded) {
  std::vector<std::string> keys;
  auto check = [&](bool differs, const char* key) {
    if (differs) keys.emplace_back(key);
  };
  check(now.listen.host != loaded.listen.host || now.listen.port != loaded.listen.port, "listen");
  check(upstream_list(now) != upstream_list(loaded) ||
            now.upstream_connect_timeout != loaded.upstream_connect_timeout,
        "upstream");
  check(now.threads != loaded.threads, "threads");
  check(now.metrics.host != loaded.metrics.host || now.metrics.port != loaded.metrics.port ||
            now.metrics_max_queue_labels != loaded.metrics_max_queue_labels,
        "metrics");
  check(now.log_format != loaded.log_format, "log.format");
  check(now.max_frame_bytes != loaded.max_frame_bytes || now.buffer_bytes != loaded.buffer_bytes ||
            now.retained_body_bytes != loaded.retained_body_bytes,
        "limits");
  check(now.handshake_timeout != loaded.handshake_timeout, "timeouts");
  check(now.tracker_max_entries != loaded.tracker_max_entries ||
            now.tracker_idle_ttl != loaded.tracker_idle_ttl,
        "tracker");
  check(tls_signature(now) != tls_signature(loaded), "listen.tls or upstream.tls");
  check(management_signature(now) != management_signature(loaded), "upstream.management");
  check(now.reload_watch != loaded.reload_watch, "reload.watch");
  return keys;
}

// The thread count, and nothing else. BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO with one thread
// saved about 460 mutex instructions per message (run RS), but the one paired latency run that
// compared it end to end put it 29 µs behind, beside a slot bias of 17 µs found afterwards
// (docs/performance.md, runs PL2 and PL5): not shown to pay, so Asio's default stays.
int io_concurrency_hint(unsigned threads) {
  return static_cast<int>(threads);
}

}  // namespace

App::App(config::Config config, retry::PolicySet policies)
    : config_(std::move(config)),
      registry_(registry_options(config_)),
      metrics_listener_(registry_, &log_listener_),
      guard_(guard_settings(config_), std::make_shared<const retry::PolicySet>(std::move(policies)),
             &metrics_listener_),
      io_(io_concurrency_hint(config_.threads)),
      signals_strand_(boost::asio::make_strand(io_)),
      stop_signals_(signals_strand_, SIGINT, SIGTERM),
      reload_signal_(signals_strand_, SIGHUP),
      drain_timer_(signals_strand_),
      status_timer_(signals_strand_) {
  net::RelayOptions options = relay_options(config_, guard_);
  options.metrics = &registry_;
  server_ = std::make_unique<net::Server>(io_, config_.listen.host, config_.listen.port, options);
  metrics::watch_guard_context(registry_, guard_);
  registry_.set_source(metrics::Metric::accept_failures_total,
                       [this] { return static_cast<double>(server_->accept_failures()); });
  retry::BodyBudget& budget = guard_.budget();
  registry_.set_source(metrics::Metric::retained_body_refusals_total,
                       [&budget] { return static_cast<double>(budget.refusals()); });
  registry_.set_source(metrics::Metric::untracked_deliveries_total,
                       [&budget] { return static_cast<double>(budget.untracked()); });
  status_ = std::make_unique<status::StatusBoard>(guard_, registry_, kVersion, host_name());
  status_->set_config(status_config(config_, guard_.policies()->policies().size()));
  status_->set_queue_limits([this] {
    return status::management_rows(guard_.learnt_limits().rows(status::kMaxQueues),
                                   guard_.steady_ms(), guard_.wall_ms());
  });
  if (config_.upstream_management) {
    management_ = std::make_unique<net::ManagementClient>(io_, *config_.upstream_management,
                                                          guard_.learnt_limits(), &registry_,
                                                          [this] { return guard_.steady_ms(); });
  }
  metrics::HttpHandlers handlers;
  handlers.metrics = [this] { return registry_.render(); };
  handlers.status_json = [this] { return status_->json(); };
  handlers.status_page = [] { return status::status_page(); };
  handlers.not_ready_reason = [this] { return not_ready_reason(); };
  metrics::HttpServerOptions http;
  http.on_error = [](const std::string& what) { spdlog::warn("metrics endpoint: {}", what); };
  metrics_server_ = std::make_unique<metrics::HttpServer>(io_, config_.metrics.host,
                                                          config_.metrics.port, handlers, http);
}

std::optional<std::string> App::not_ready_reason() const {
  if (shutting_down_) return "draining: shutting down";
  std::optional<std::string> upstream = server_->upstream_unreachable();
  if (upstream) return upstream;
  return std::nullopt;
}

int App::run() {
  server_->start();
  metrics_server_->start();
  if (management_) management_->start();
  watch_files();
  spdlog::info("nackguard {} listening on {}:{}, forwarding to {} ({} threads)", kVersion,
               config_.listen.host, config_.listen.port, upstream_list(config_), config_.threads);
  wait_for_stop();
  wait_for_reload();
  tick_status();
  // A handler's exception is logged and the thread runs on: one connection's internal error
  // must not end the others' (nor the process, without a word, through std::terminate).
  auto run = [this] {
    net::run_reporting_errors(io_, [](const std::string& what) {
      spdlog::critical("internal error on a worker thread: {}; nackguard goes on", what);
    });
  };
  std::vector<std::thread> workers;
  for (unsigned i = 1; i < config_.threads; ++i) workers.emplace_back(run);
  run();
  for (auto& worker : workers) worker.join();
  spdlog::info("nackguard stopped");
  return 0;
}

void App::wait_for_stop() {
  stop_signals_.async_wait([this](const boost::system::error_code& ec, int signal) {
    if (ec) return;
    if (shutting_down_) {
      spdlog::warn("second signal {}: exiting at once", signal);
      spdlog::shutdown();
      std::_Exit(1);
    }
    begin_shutdown(signal);
    wait_for_stop();
  });
}

void App::wait_for_reload() {
  reload_signal_.async_wait([this](const boost::system::error_code& ec, int) {
    if (ec) return;
    reload();
    wait_for_reload();
  });
}

void App::watch_files() {
  if (!config_.reload_watch) return;
  config_watcher_ =
      std::make_unique<net::ConfigWatcher>(signals_strand_, [this](const std::string& what) {
        spdlog::info("reload: {} changed; reloading", what);
        reload();
      });
  config_watcher_->start(config_.file, config_.policies_dir);
}

void App::reload() {
  try {
    config::Config loaded = config::load_config(config_.file);
    retry::PolicySet policies = config::load_policies(loaded.policies_dir);
    for (const std::string& warning : config::policy_warnings(policies))
      spdlog::warn("{}", warning);
    std::size_t count = policies.policies().size();
    guard_.set_policies(std::make_shared<const retry::PolicySet>(std::move(policies)));
    spdlog::set_level(spdlog::level::from_str(loaded.log_level));
    for (const std::string& key : keys_needing_restart(config_, loaded)) {
      spdlog::warn("reload: {} changed in {} but takes effect only after a restart", key,
                   config_.file.string());
    }
    config_.policies_dir = loaded.policies_dir;
    config_.log_level = loaded.log_level;
    config_.shutdown_grace = loaded.shutdown_grace;  // read only when a shutdown begins
    config_.metrics_show_identities = loaded.metrics_show_identities;
    status_->set_config(status_config(config_, count));
    spdlog::info("reload: {} policies loaded from {}", count, config_.policies_dir.string());
    record_reload(true, {});
  } catch (const config::ConfigError& e) {
    spdlog::error("reload failed, the previous policies stay in force: {}", e.what());
    record_reload(false, e.what());
  } catch (const std::exception& e) {
    // Not a mistake in the files (out of memory, a file system error): said as such.
    spdlog::error(
        "reload of {} failed by an internal error, the previous policies stay in "
        "force: {}",
        config_.file.string(), e.what());
    record_reload(false, std::string("internal error: ") + e.what());
  } catch (...) {
    spdlog::error(
        "reload of {} failed by an unknown internal error, the previous policies stay "
        "in force",
        config_.file.string());
    record_reload(false, "unknown internal error");
  }
  // policies_dir may have changed, or now lead to another directory (a ConfigMap update).
  if (config_watcher_) config_watcher_->follow(config_.policies_dir);
}

void App::record_reload(bool ok, const std::string& message) {
  registry_.policy_reload(ok);
  status_->reloaded(status::ReloadRecord{guard_.wall_ms(), ok, message});
}

void App::tick_status() {
  status_->tick();
  status_timer_.expires_after(std::chrono::seconds(10));
  status_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) tick_status();
  });
}

void App::begin_shutdown(int signal) {
  shutting_down_ = true;
  spdlog::info("signal {}: no new connections; clients get {} ms to leave before they are closed",
               signal, config_.shutdown_grace.count());
  server_->shutdown(config_.shutdown_grace);
  watch_drain();
}

void App::watch_drain() {
  drain_timer_.expires_after(std::chrono::milliseconds(100));
  drain_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    if (server_->live_connections() == 0) {
      metrics_server_->stop();
      stop_signals_.cancel();
      reload_signal_.cancel();
      status_timer_.cancel();
      if (management_) management_->stop();
      if (config_watcher_) config_watcher_->cancel();
      io_.stop();
      return;
    }
    watch_drain();
  });
}

}  // namespace nackguard
