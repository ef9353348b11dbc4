#include "proxy/replay/options.hpp"

#include <boost/program_options.hpp>
#include <charconv>
#include <cmath>
#include <sstream>

#include "proxy/replay/errors.hpp"

namespace nackguard::replay {

namespace po = boost::program_options;

namespace {

constexpr const char* kUsage =
    "Usage: nackguard replay --upstream amqp[s]://USER:PASS@HOST:PORT/VHOST --from Q.dlq --to Q\n"
    "                        [--limit N] [--rate MSG_PER_S] [--max-replays N] [--dry-run]\n"
    "                        [--group-by KEY[,KEY...]] [--where KEY=VALUE]... [--since D]\n"
    "                        [--until D] [--format text|json]\n"
    "                        [--ca-file PEM] [--cert-file PEM --key-file PEM]\n"
    "                        [--server-name NAME] [--no-verify]\n"
    "Moves dead-lettered messages from --from back to --to, acking each original only after\n"
    "the broker has confirmed its copy. Credentials may come from NACKGUARD_REPLAY_UPSTREAM\n"
    "(a whole URL, or USER:PASS) so that they do not show in ps; see docs/replay.md.\n"
    "Options";

po::options_description describe_options() {
  po::options_description options(kUsage);
  options.add_options()  //
      ("upstream", po::value<std::string>()->value_name("URL"),
       "the broker: amqp://USER:PASS@HOST:PORT/VHOST (vhost percent-encoded, %2F = /); "
       "amqps:// for TLS (port 5671 by default), with ?auth_mechanism=external to log in with "
       "the client certificate (SASL EXTERNAL)")  //
      ("ca-file", po::value<std::string>()->value_name("PEM"),
       "amqps: the CAs that may sign the broker's certificate (default: the system's)")  //
      ("cert-file", po::value<std::string>()->value_name("PEM"),
       "amqps: the client certificate to present (with --key-file)")  //
      ("key-file", po::value<std::string>()->value_name("PEM"),
       "amqps: the client certificate's private key, unencrypted")  //
      ("server-name", po::value<std::string>()->value_name("NAME"),
       "amqps: the name the broker's certificate must carry (default: the URL's host)")          //
      ("no-verify", "amqps: do not verify the broker's certificate (tests only)")                //
      ("from", po::value<std::string>()->value_name("QUEUE"), "the dead-letter queue to empty")  //
      ("to", po::value<std::string>()->value_name("QUEUE"),
       "the queue to move messages to (published to it through the default exchange)")  //
      ("limit", po::value<std::string>()->value_name("N"), "move at most N messages")   //
      ("rate", po::value<std::string>()->value_name("MSG_PER_S"),
       "move at most this many messages per second")  //
      ("max-replays", po::value<std::string>()->value_name("N")->default_value("3"),
       "leave a message in --from once its x-nackguard-replays reaches N")  //
      ("dry-run", "count what would move, by group; move nothing")          //
      ("group-by", po::value<std::string>()->value_name("KEY[,KEY...]"),
       "group the summary by these keys: reason, queue, consumer, day, header:NAME "
       "(default: reason)")  //
      ("where", po::value<std::vector<std::string>>()->value_name("KEY=VALUE"),
       "only messages whose KEY is VALUE (repeatable: all must hold); the others stay")  //
      ("since", po::value<std::string>()->value_name("DURATION"),
       "only messages whose last return is at most DURATION ago (30m, 2h, 7d)")  //
      ("until", po::value<std::string>()->value_name("DURATION"),
       "only messages whose last return is at least DURATION ago")  //
      ("format", po::value<std::string>()->value_name("FORMAT")->default_value("text"),
       "the summary as text, or as one JSON document (json)")  //
      ("help,h", "print this help and exit");
  return options;
}

std::string usage_text() {
  std::ostringstream text;
  text << describe_options();
  return text.str();
}

const std::string* value_of(const po::variables_map& args, const char* name) {
  return args.count(name) ? &args[name].as<std::string>() : nullptr;
}

std::string required_queue(const po::variables_map& args, const char* name) {
  const std::string* value = value_of(args, name);
  if (value == nullptr) throw UsageError("--" + std::string(name) + " QUEUE is required");
  if (value->empty()) throw UsageError("--" + std::string(name) + " must not be empty");
  if (value->size() > 255) {
    throw UsageError("--" + std::string(name) + " is longer than 255 bytes, AMQP's limit");
  }
  return *value;
}

std::chrono::seconds duration_of(const po::variables_map& args, const char* name) {
  std::optional<std::chrono::seconds> duration = parse_duration(*value_of(args, name));
  if (!duration) {
    throw UsageError("--" + std::string(name) +
                     " must be a whole number and a unit: s, m, h or d (e.g. 30m, 2h, 7d)");
  }
  return *duration;
}

constexpr const char* kKeys = "reason, queue, consumer, day or header:NAME";

void parse_triage(const po::variables_map& args, Options& out) {
  if (const std::string* keys = value_of(args, "group-by")) {
    out.group_by.clear();
    std::string_view rest = *keys;
    for (;;) {
      std::size_t comma = rest.find(',');
      std::string_view text = rest.substr(0, comma);
      std::optional<TriageKey> key = parse_key(text);
      if (!key) {
        throw UsageError("--group-by: '" + std::string(text) + "' is not a key; use " + kKeys);
      }
      out.group_by.push_back(*key);
      if (comma == std::string_view::npos) break;
      rest = rest.substr(comma + 1);
    }
  }
  if (args.count("where")) {
    for (const std::string& text : args["where"].as<std::vector<std::string>>()) {
      std::optional<Condition> condition = parse_condition(text);
      if (!condition) {
        throw UsageError("--where '" + text + "' is not KEY=VALUE with KEY one of " + kKeys);
      }
      out.where.push_back(*condition);
    }
  }
  if (value_of(args, "since")) out.since = duration_of(args, "since");
  if (value_of(args, "until")) out.until = duration_of(args, "until");
  if (out.since && out.until && *out.until >= *out.since) {
    throw UsageError("--until must be shorter than --since, or the window is empty");
  }
  const std::string& format = *value_of(args, "format");
  if (format != "text" && format != "json") throw UsageError("--format must be text or json");
  out.json = format == "json";
}

// TLS options need an amqps:// URL; EXTERNAL needs a client certificate.
void parse_tls(const po::variables_map& args, Options& out) {
  TlsSettings& tls = out.tls;
  tls.enabled = out.upstream.tls;
  for (const char* name : {"ca-file", "cert-file", "key-file", "server-name", "no-verify"}) {
    if (args.count(name) && !tls.enabled) {
      throw UsageError("--" + std::string(name) + " needs an amqps:// URL");
    }
  }
  if (const std::string* v = value_of(args, "ca-file")) tls.ca_file = *v;
  if (const std::string* v = value_of(args, "cert-file")) tls.cert_file = *v;
  if (const std::string* v = value_of(args, "key-file")) tls.key_file = *v;
  if (const std::string* v = value_of(args, "server-name")) tls.server_name = *v;
  tls.verify = args.count("no-verify") == 0;
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    throw UsageError("--cert-file and --key-file go together");
  }
  if (out.upstream.external && tls.cert_file.empty()) {
    throw UsageError(
        "auth_mechanism=external logs in with the client certificate: give an amqps:// URL, "
        "--cert-file and --key-file");
  }
}

}  // namespace

std::optional<std::uint64_t> parse_count(const std::string& text) {
  std::uint64_t value = 0;
  const char* end = text.data() + text.size();
  auto [stop, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc{} || stop != end) return std::nullopt;
  return value;
}

std::optional<double> parse_rate(const std::string& text) {
  double value = 0;
  const char* end = text.data() + text.size();
  auto [stop, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc{} || stop != end || !std::isfinite(value)) {
    return std::nullopt;
  }
  return value;
}

ParsedArgs parse_args(int argc, const char* const* argv,
                      const std::optional<std::string>& env_upstream) {
  po::options_description options = describe_options();
  po::variables_map args;
  try {
    // An empty positional description makes a stray word an error instead of being ignored.
    po::positional_options_description no_positionals;
    po::store(po::command_line_parser(argc, argv).options(options).positional(no_positionals).run(),
              args);
    po::notify(args);
  } catch (const po::error& e) {
    throw UsageError(e.what());
  }
  ParsedArgs parsed;
  if (args.count("help")) {
    parsed.help = true;
    parsed.usage = usage_text();
    return parsed;
  }

  Options& out = parsed.options;
  out.from = required_queue(args, "from");
  out.to = required_queue(args, "to");
  if (out.from == out.to) throw UsageError("--from and --to name the same queue");
  if (const std::string* limit = value_of(args, "limit")) {
    out.limit = parse_count(*limit);
    if (!out.limit || *out.limit == 0) {
      throw UsageError("--limit must be a whole number of messages, at least 1");
    }
  }
  if (const std::string* rate = value_of(args, "rate")) {
    out.rate = parse_rate(*rate);
    if (!out.rate || *out.rate <= 0) {
      throw UsageError("--rate must be a number of messages per second above 0, e.g. 50 or 0.5");
    }
  }
  auto max_replays = parse_count(*value_of(args, "max-replays"));
  if (!max_replays || *max_replays == 0 || *max_replays > 1'000'000) {
    throw UsageError("--max-replays must be a whole number from 1 to 1000000");
  }
  out.max_replays = static_cast<std::int64_t>(*max_replays);
  out.dry_run = args.count("dry-run") > 0;
  parse_triage(args, out);

  std::optional<std::string> cli_upstream;
  if (const std::string* upstream = value_of(args, "upstream")) cli_upstream = *upstream;
  out.upstream = resolve_upstream(cli_upstream, env_upstream);
  parse_tls(args, out);
  return parsed;
}

}  // namespace nackguard::replay
