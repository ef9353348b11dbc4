// nackguard: arguments, then config, then io_context threads and signals.

#include <spdlog/spdlog.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/program_options.hpp>
#include <iostream>
#include <thread>
#include <vector>

#include "nackguard/version.hpp"
#include "proxy/config/config.hpp"
#include "proxy/config/policy_loader.hpp"
#include "proxy/logging.hpp"
#include "proxy/net/log_listener.hpp"
#include "proxy/net/server.hpp"

namespace po = boost::program_options;
using namespace nackguard;

namespace {

session::GuardSettings guard_settings(const config::Config& cfg) {
  session::GuardSettings settings;
  settings.tracker_max_entries = cfg.tracker_max_entries;
  settings.tracker_idle_ttl = cfg.tracker_idle_ttl;
  settings.retained_body_bytes = cfg.retained_body_bytes;
  return settings;
}

net::RelayOptions relay_options(const config::Config& cfg) {
  net::RelayOptions options;
  options.upstream_host = cfg.upstream.host;
  options.upstream_port = cfg.upstream.port;
  options.connect_timeout = cfg.upstream_connect_timeout;
  options.handshake_timeout = cfg.handshake_timeout;
  options.buffer_bytes = cfg.buffer_bytes;
  options.session.max_frame_bytes = cfg.max_frame_bytes;
  return options;
}

int serve(const config::Config& cfg, retry::PolicySet policies) {
  setup_logging(cfg.log_level, cfg.log_format);
  net::LogListener log_listener;
  session::GuardContext guard(guard_settings(cfg),
                              std::make_shared<const retry::PolicySet>(std::move(policies)),
                              &log_listener);
  net::RelayOptions options = relay_options(cfg);
  options.guard_context = &guard;
  options.session.body_budget = &guard.budget();
  boost::asio::io_context io(static_cast<int>(cfg.threads));
  net::Server server(io, cfg.listen.host, cfg.listen.port, options);
  server.start();
  spdlog::info("nackguard {} listening on {}:{}, forwarding to {}:{} ({} threads)", kVersion,
               cfg.listen.host, cfg.listen.port, cfg.upstream.host, cfg.upstream.port, cfg.threads);

  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int signal) {
    if (ec) return;
    spdlog::info("signal {} received; stopping", signal);
    server.stop();
    io.stop();
  });

  std::vector<std::thread> workers;
  for (unsigned i = 1; i < cfg.threads; ++i) workers.emplace_back([&io] { io.run(); });
  io.run();
  for (auto& worker : workers) worker.join();
  spdlog::info("nackguard stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  po::options_description options("Usage: nackguard --config FILE [--check-config]\nOptions");
  options.add_options()("config,c", po::value<std::string>()->default_value("conf/nackguard.yaml"),
                        "the proxy's config file")(
      "check-config", "validate the config file, print the effective settings, and exit")(
      "version", "print the version and exit")("help,h", "print this help and exit");
  po::variables_map args;
  try {
    po::store(po::parse_command_line(argc, argv, options), args);
    po::notify(args);
  } catch (const po::error& e) {
    std::cerr << "nackguard: " << e.what() << "\n" << options;
    return 2;
  }
  if (args.count("help")) {
    std::cout << options;
    return 0;
  }
  if (args.count("version")) {
    std::cout << "nackguard " << kVersion << "\n";
    return 0;
  }

  config::Config cfg;
  retry::PolicySet policies;
  try {
    cfg = config::load_config(args["config"].as<std::string>());
    policies = config::load_policies(cfg.policies_dir);
  } catch (const config::ConfigError& e) {
    std::cerr << "nackguard: " << e.what() << "\n";
    return 1;
  }
  if (args.count("check-config")) {
    std::cout << "config OK: " << cfg.file.string() << "\n"
              << config::describe(cfg) << "\n"
              << config::describe_policies(policies);
    return 0;
  }
  try {
    return serve(cfg, std::move(policies));
  } catch (const std::exception& e) {
    spdlog::critical("{}", e.what());
    std::cerr << "nackguard: " << e.what() << "\n";
    return 1;
  }
}
