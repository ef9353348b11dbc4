// nackguard: arguments, then config, then io_context threads and signals.

#include <spdlog/spdlog.h>

#include <boost/program_options.hpp>
#include <cstdlib>
#include <exception>
#include <iostream>

#include "nackguard/version.hpp"
#include "proxy/app.hpp"
#include "proxy/config/config.hpp"
#include "proxy/config/policy_loader.hpp"
#include "proxy/logging.hpp"
#include "proxy/net/management_client.hpp"
#include "proxy/net/tls.hpp"
#include "proxy/replay/replay.hpp"
#include "proxy/status/status_cli.hpp"

namespace po = boost::program_options;
using namespace nackguard;

namespace {

[[noreturn]] void log_and_abort() {
  std::string why = "no exception";
  if (std::exception_ptr error = std::current_exception()) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      why = e.what();
    } catch (...) {
      why = "an exception that is not a std::exception";
    }
  }
  spdlog::critical("terminating: {}", why);
  spdlog::shutdown();
  std::cerr << "nackguard: terminating: " << why << "\n";
  std::abort();
}

// Runs the proxy until it is drained after a signal; its exit code.
int run_proxy(config::Config cfg, retry::PolicySet policies) {
  try {
    setup_logging(cfg.log_level, cfg.log_format);
    for (const std::string& warning : config::policy_warnings(policies))
      spdlog::warn("{}", warning);
    // Whatever still ends the process through std::terminate says why in the log first.
    std::set_terminate(log_and_abort);
    App app(std::move(cfg), std::move(policies));
    return app.run();
  } catch (const std::exception& e) {
    spdlog::critical("{}", e.what());
    std::cerr << "nackguard: " << e.what() << "\n";
    return 1;
  } catch (...) {
    spdlog::critical("stopped by an exception that is not a std::exception");
    std::cerr << "nackguard: stopped by an exception that is not a std::exception\n";
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::string_view(argv[1]) == "replay") {
    return nackguard::replay::main(argc - 1, argv + 1);
  }
  if (argc >= 2 && std::string_view(argv[1]) == "status") {
    return nackguard::status::main(argc - 1, argv + 1);
  }
  po::options_description options(
      "Usage: nackguard --config FILE [--check-config]\n"
      "       nackguard replay --help   (move dead-lettered messages back)\n"
      "       nackguard status --help   (what is looping now, from a running proxy)\nOptions");
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
    net::load_tls(cfg);  // a certificate or key OpenSSL refuses is a config error too
    net::check_management_tls(cfg);
  } catch (const config::ConfigError& e) {
    std::cerr << "nackguard: " << e.what() << "\n";
    return 1;
  }
  if (args.count("check-config")) {
    std::cout << "config OK: " << cfg.file.string() << "\n"
              << config::describe(cfg) << "\n"
              << config::describe_policies(policies);
    for (const std::string& warning : config::policy_warnings(policies)) {
      std::cerr << warning << "\n";
    }
    for (const std::string& note : config::policy_notes(policies)) std::cerr << note << "\n";
    return 0;
  }
  return run_proxy(std::move(cfg), std::move(policies));
}
