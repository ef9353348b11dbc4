// `nackguard status`: its command line (status_cli.hpp).

#include <boost/json/parse.hpp>
#include <boost/program_options.hpp>
#include <chrono>
#include <iostream>
#include <thread>

#include "proxy/status/status_cli.hpp"

namespace nackguard::status {

namespace po = boost::program_options;

namespace {

constexpr std::chrono::seconds kTimeout{5};

// One fetch and print; false (with the reason on stderr) when the proxy could not be read.
bool show(const std::string& url, bool clear) {
  std::string out;
  try {
    out = render_text(boost::json::parse(fetch(url, kTimeout)));
  } catch (const std::exception& e) {
    if (clear) std::cout << "\033[H\033[2J" << std::flush;
    std::cerr << "nackguard status: " << e.what() << "\n";
    return false;
  }
  if (clear) out = "\033[H\033[2J" + out;
  std::cout << out << std::flush;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  po::options_description options(
      "Usage: nackguard status [--url URL] [--watch [--interval S]]\n"
      "Prints what nackguard's /status page shows: the messages returned most, the queues, "
      "the limits and the last reload.\nOptions");
  options.add_options()(
      "url", po::value<std::string>()->default_value("http://127.0.0.1:9464/status.json"),
      "the proxy's metrics endpoint (metrics.address and metrics.port); with no path, "
      "/status.json")("watch,w", "redraw until interrupted")(
      "interval", po::value<unsigned>()->default_value(2), "seconds between redraws, 1..3600")(
      "help,h", "print this help and exit");
  po::variables_map args;
  try {
    po::store(po::parse_command_line(argc, argv, options), args);
    po::notify(args);
  } catch (const po::error& e) {
    std::cerr << "nackguard status: " << e.what() << "\n" << options;
    return 2;
  }
  if (args.count("help")) {
    std::cout << options;
    return 0;
  }
  const unsigned interval = args["interval"].as<unsigned>();
  if (interval < 1 || interval > 3600) {
    std::cerr << "nackguard status: --interval " << interval << " is outside 1..3600 seconds\n";
    return 2;
  }
  const std::string url = args["url"].as<std::string>();
  if (!args.count("watch")) return show(url, false) ? 0 : 1;
  for (;;) {
    show(url, true);
    std::this_thread::sleep_for(std::chrono::seconds(interval));
  }
}

}  // namespace nackguard::status
