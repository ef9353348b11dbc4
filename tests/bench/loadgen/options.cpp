#include "loadgen/options.hpp"

#include <algorithm>
#include <boost/program_options.hpp>
#include <charconv>
#include <cmath>
#include <iostream>
#include <limits>

namespace nackguard::bench {

namespace po = boost::program_options;

namespace {

constexpr const char* kUsage =
    "Usage: nackguard-bench [--host H] [--port P] [--messages N] [--size S] [--connections C]\n"
    "                       [--prefetch P] [--ack-every K] [--confirm-window W]\n"
    "                       [--nack-fraction F] [--mode sequential|concurrent] [--rate R]\n"
    "                       [--pid PID]... [--label NAME] [--targets LABEL=PORT,...]\n"
    "Publishes N messages of S bytes over C connections (publisher confirms, W unconfirmed at\n"
    "most per connection), then consumes them over C more connections with prefetch P and one\n"
    "ack per message (or per K, multiple=true). Connection i publishes to and consumes from its\n"
    "own queue. Prints a table and one JSON line; exits 1 if not every message went through.\n"
    "With --targets (a paired run), connection i goes to target i mod n, the publishers take\n"
    "turns message by message, and the report gives each target's latency.\n"
    "Options";

po::options_description describe_options() {
  po::options_description options(kUsage);
  options.add_options()                                                                          //
      ("host", po::value<std::string>()->default_value("127.0.0.1"), "broker or proxy address")  //
      ("port", po::value<std::string>()->default_value("5672"), "its AMQP port")                 //
      ("user", po::value<std::string>()->default_value("guest"), "SASL PLAIN user")              //
      ("password", po::value<std::string>()->default_value("guest"), "its password")             //
      ("vhost", po::value<std::string>()->default_value("/"), "virtual host")                    //
      ("label", po::value<std::string>()->default_value(""), "names the run in the report")      //
      ("tls-ca", po::value<std::string>()->default_value(""),
       "connect with TLS, verifying the peer's certificate chain against this CA file (PEM)")  //
      ("mode", po::value<std::string>()->default_value("sequential"),
       "sequential: publish all, then consume all (a rate per direction); concurrent: "
       "consumers run while publishers publish (latency without queueing)")                 //
      ("messages,n", po::value<std::string>()->default_value("100000"), "messages in all")  //
      ("size,s", po::value<std::string>()->default_value("1024"),
       "body bytes, at least 16 (a timestamp and a sequence number); k and m suffixes are "
       "KiB and MiB")  //
      ("connections,c", po::value<std::string>()->default_value("1"),
       "publishing connections, and as many consuming ones, one queue each")                    //
      ("prefetch", po::value<std::string>()->default_value("100"), "basic.qos prefetch_count")  //
      ("ack-every", po::value<std::string>()->default_value("1"),
       "ack every K deliveries with multiple=true (at most the prefetch)")  //
      ("confirm-window", po::value<std::string>()->default_value("512"),
       "unconfirmed publishes per connection before waiting for confirms")  //
      ("nack-fraction", po::value<std::string>()->default_value("0"),
       "fraction of the messages nacked with requeue=true (--nack-times times), then acked "
       "when they come back")  //
      ("nack-times", po::value<std::string>()->default_value("1"),
       "how often each message chosen by --nack-fraction is nacked before it is acked")  //
      ("quorum", "declare the queues as quorum queues (durable)")                        //
      ("rate", po::value<std::string>()->default_value("0"),
       "total msg/s the publishers keep to (0: as fast as they can), evenly spaced across "
       "them")  //
      ("targets", po::value<std::string>()->default_value(""),
       "LABEL=PORT[,LABEL=PORT...]: connection i goes to target i mod n on --host (--port "
       "then serves only the setup connection); needs --rate; --connections defaults to n")     //
      ("persistent", "publish with delivery_mode 2 (default 1, transient)")                     //
      ("no-message-id", "publish without message_id (the proxy then hashes the body)")          //
      ("frame-max", po::value<std::string>()->default_value("131072"), "frame_max to ask for")  //
      ("pid", po::value<std::vector<std::string>>()->composing(),
       "a process whose CPU seconds and peak RSS are measured over the run (repeatable)")  //
      ("stall-timeout", po::value<std::string>()->default_value("30"),
       "seconds without progress before giving up")  //
      ("timeout", po::value<std::string>()->default_value("900"),
       "seconds in all before giving up")        //
      ("json-only", "print only the JSON line")  //
      ("help,h", "print this help and exit");
  return options;
}

std::uint64_t parse_unsigned(const std::string& name, const std::string& text, std::uint64_t min,
                             std::uint64_t max, bool size_suffix = false) {
  std::uint64_t value = 0;
  const char* begin = text.data();
  const char* end = begin + text.size();
  auto [stop, ec] = std::from_chars(begin, end, value);
  std::uint64_t scale = 1;
  if (size_suffix && stop + 1 == end) {
    if (*stop == 'k' || *stop == 'K') scale = 1024;
    if (*stop == 'm' || *stop == 'M') scale = 1024 * 1024;
    if (scale != 1) ++stop;
  }
  if (text.empty() || ec != std::errc{} || stop != end) {
    throw UsageError("--" + name + " '" + text + "' is not a whole number");
  }
  value *= scale;
  if (value < min || value > max) {
    throw UsageError("--" + name + " " + text + " is outside " + std::to_string(min) + ".." +
                     std::to_string(max));
  }
  return value;
}

// "direct=5672,nackguard=5673" into targets, each label once.
std::vector<Target> parse_targets(const std::string& text) {
  std::vector<Target> targets;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    const std::size_t comma = std::min(text.find(',', begin), text.size());
    const std::string item = text.substr(begin, comma - begin);
    const std::size_t equals = item.find('=');
    if (equals == 0 || equals == std::string::npos) {
      throw UsageError("--targets '" + item +
                       "': give each target as LABEL=PORT, e.g. direct=5672,nackguard=5673");
    }
    Target target{item.substr(0, equals), 0};
    try {
      target.port =
          static_cast<std::uint16_t>(parse_unsigned("targets", item.substr(equals + 1), 1, 65535));
    } catch (const UsageError&) {
      throw UsageError("--targets '" + item + "': the port must be a whole number in 1..65535");
    }
    for (const Target& seen : targets) {
      if (seen.label == target.label) {
        throw UsageError("--targets names '" + target.label + "' twice: give each label once");
      }
    }
    targets.push_back(std::move(target));
    begin = comma + 1;
  }
  return targets;
}

double parse_double(const std::string& name, const std::string& text, double min, double max) {
  double value = 0;
  const char* end = text.data() + text.size();
  auto [stop, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc{} || stop != end || !std::isfinite(value)) {
    throw UsageError("--" + name + " '" + text + "' is not a number");
  }
  if (value < min || value > max) {
    throw UsageError("--" + name + " " + text + " is outside " + std::to_string(min) + ".." +
                     std::to_string(max));
  }
  return value;
}

// A paired run: the connections share out evenly over the targets, at a rate that keeps
// each message alone in the pipe.
void check_targets(const Options& o) {
  if (o.targets.empty()) return;
  const std::string n = std::to_string(o.targets.size());
  if (o.connections % o.targets.size() != 0) {
    throw UsageError("--connections " + std::to_string(o.connections) +
                     " is not a multiple of the " + n + " --targets: give a multiple of " + n +
                     " (each target gets as many), or leave it out for one per target");
  }
  if (o.rate <= 0) {
    throw UsageError(
        "--targets needs --rate: a paired run flat out measures queueing, not "
        "latency; give a total rate at which each message is alone in the pipe");
  }
}

}  // namespace

std::optional<Options> parse_options(int argc, char** argv) {
  po::options_description described = describe_options();
  po::variables_map args;
  try {
    po::store(po::command_line_parser(argc, argv).options(described).run(), args);
    po::notify(args);
  } catch (const po::error& e) {
    throw UsageError(e.what());
  }
  if (args.count("help")) {
    std::cout << described;
    return std::nullopt;
  }
  auto text = [&](const char* name) { return args[name].as<std::string>(); };
  auto number = [&](const char* name, std::uint64_t min, std::uint64_t max) {
    return parse_unsigned(name, text(name), min, max);
  };

  Options o;
  o.host = text("host");
  o.port = static_cast<std::uint16_t>(number("port", 1, 65535));
  o.user = text("user");
  o.password = text("password");
  o.vhost = text("vhost");
  o.label = text("label");
  o.tls_ca_file = text("tls-ca");
  if (!text("targets").empty()) o.targets = parse_targets(text("targets"));
  const std::string mode = text("mode");
  if (mode == "sequential") {
    o.mode = Mode::sequential;
  } else if (mode == "concurrent") {
    o.mode = Mode::concurrent;
  } else {
    throw UsageError("--mode '" + mode + "': use sequential or concurrent");
  }
  o.messages = number("messages", 1, 1'000'000'000);
  o.size = parse_unsigned("size", text("size"), 16, 128u << 20, true);
  o.connections = static_cast<std::uint32_t>(number("connections", 1, 2000));
  if (!o.targets.empty() && args["connections"].defaulted()) {
    o.connections = static_cast<std::uint32_t>(o.targets.size());
  }
  o.prefetch = static_cast<std::uint16_t>(number("prefetch", 1, 65535));
  o.ack_every = static_cast<std::uint32_t>(number("ack-every", 1, 65535));
  o.confirm_window = static_cast<std::uint32_t>(number("confirm-window", 1, 1'000'000));
  o.nack_fraction = parse_double("nack-fraction", text("nack-fraction"), 0, 1);
  o.nack_times = static_cast<std::uint32_t>(number("nack-times", 1, 250));
  o.quorum = args.count("quorum") > 0;
  o.rate = parse_double("rate", text("rate"), 0, 1e9);
  o.persistent = args.count("persistent") > 0;
  o.message_id = args.count("no-message-id") == 0;
  o.frame_max = static_cast<std::uint32_t>(number("frame-max", 4096, 16u << 20));
  o.stall_timeout_s = parse_double("stall-timeout", text("stall-timeout"), 1, 86400);
  o.timeout_s = parse_double("timeout", text("timeout"), 1, 864000);
  o.json_only = args.count("json-only") > 0;
  if (args.count("pid")) {
    for (const std::string& pid : args["pid"].as<std::vector<std::string>>()) {
      o.pids.push_back(static_cast<pid_t>(parse_unsigned("pid", pid, 1, 1u << 30)));
    }
  }
  if (o.ack_every > o.prefetch) {
    throw UsageError("--ack-every " + std::to_string(o.ack_every) + " is above --prefetch " +
                     std::to_string(o.prefetch) +
                     ": the consumer would wait for deliveries the broker holds back");
  }
  check_targets(o);
  if (o.messages < o.connections) {
    throw UsageError("--messages must be at least --connections (one message per queue)");
  }
  return o;
}

}  // namespace nackguard::bench
