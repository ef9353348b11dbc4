// nackguard replay: arguments, then the broker connection, then the run and its summary.

#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <iostream>

#include "proxy/replay/amqp_client.hpp"
#include "proxy/replay/errors.hpp"
#include "proxy/replay/options.hpp"
#include "proxy/replay/replay.hpp"
#include "proxy/replay/replayer.hpp"
#include "proxy/replay/report.hpp"

namespace nackguard::replay {

namespace {

constexpr const char* kPrefix = "nackguard replay: ";

volatile std::sig_atomic_t g_interrupted = 0;

extern "C" void on_interrupt(int signal_number) {
  g_interrupted = 1;
  std::signal(signal_number, SIG_DFL);  // a second Ctrl-C ends the process at once
}

// Catches SIGINT and SIGTERM for the run, so that kept messages are requeued and the summary
// printed; restores the previous handlers afterwards.
class InterruptScope {
 public:
  InterruptScope()
      : previous_int_(std::signal(SIGINT, on_interrupt)),
        previous_term_(std::signal(SIGTERM, on_interrupt)) {}
  ~InterruptScope() {
    std::signal(SIGINT, previous_int_);
    std::signal(SIGTERM, previous_term_);
  }
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;

 private:
  void (*previous_int_)(int);
  void (*previous_term_)(int);
};

// The Replayer's view of the broker, with --from and --to bound in.
class ClientBroker final : public Broker {
 public:
  ClientBroker(Client& client, std::string from, std::string to)
      : client_(client), from_(std::move(from)), to_(std::move(to)) {}

  std::optional<Message> get() override {
    std::optional<Delivery> delivery = client_.get(from_);
    if (!delivery) return std::nullopt;
    return Message{delivery->delivery_tag, delivery->message_count, std::move(delivery->header),
                   std::move(delivery->body)};
  }
  std::uint64_t publish_copy(const amqp::ContentHeader& header, amqp::ByteView body) override {
    return client_.publish("", to_, header, body);
  }
  std::vector<Confirm> confirms(bool wait) override {
    std::vector<Confirm> out;
    for (const Confirmation& c : client_.confirms(wait)) {
      switch (c.outcome.kind) {
        case PublishOutcome::Kind::confirmed:
          out.push_back({c.seq, {CopyOutcome::Kind::confirmed, ""}});
          break;
        case PublishOutcome::Kind::nacked:
          out.push_back({c.seq, {CopyOutcome::Kind::nacked, "the broker nacked the copy"}});
          break;
        case PublishOutcome::Kind::returned:
          out.push_back(
              {c.seq,
               {CopyOutcome::Kind::returned, "the broker returned the copy: " + c.outcome.detail}});
          break;
      }
    }
    return out;
  }
  void ack(std::uint64_t delivery_tag) override { client_.ack(delivery_tag); }
  void requeue(std::span<const std::uint64_t> delivery_tags) override {
    client_.requeue(delivery_tags);
  }
  void wait_until(Clock::time_point until, const std::function<bool()>& stop) override {
    client_.idle_until(until, stop);
  }

 private:
  Client& client_;
  std::string from_;
  std::string to_;
};

// queue.declare passive, with the line a person needs when the queue is missing or forbidden.
std::uint32_t check_queue(Client& client, const Options& options, const std::string& queue,
                          const char* option) {
  try {
    return client.declare_passive(queue);
  } catch (const BrokerClosed& e) {
    const std::string where =
        "queue '" + queue + "' in vhost '" + options.upstream.vhost + "' on " + client.endpoint();
    const std::string reply = describe_reply(e.code, e.text);
    if (e.code == 404) {
      throw Failure("no " + where + " (" + reply + "); check " + option + " and the vhost");
    }
    if (e.code == 403) {
      throw Failure("user '" + options.upstream.user + "' may not use " + where + " (" + reply +
                    ")");
    }
    throw;
  }
}

int run(const Options& options) {
  ClientSettings settings;
  settings.upstream = options.upstream;
  settings.tls = options.tls;
  Client client(settings);
  RunInfo info{options.from, options.to, client.endpoint(), options.upstream.vhost,
               options.max_replays};

  std::uint32_t queued = 0;
  try {
    client.open();
    queued = check_queue(client, options, options.from, "--from");
    check_queue(client, options, options.to, "--to");
    if (!options.dry_run) client.confirm_select();
  } catch (const Failure& e) {
    std::cerr << kPrefix << e.what() << "\n";
    return 1;
  }

  Plan plan;
  plan.queued_at_start = queued;
  plan.limit = options.limit;
  plan.rate = options.rate;
  plan.max_replays = options.max_replays;
  plan.dry_run = options.dry_run;
  plan.group_by = options.group_by;
  plan.selection.where = options.where;
  const std::int64_t now_s = std::chrono::duration_cast<std::chrono::seconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count();
  if (options.since) plan.selection.since_s = now_s - options.since->count();
  if (options.until) plan.selection.until_s = now_s - options.until->count();
  auto render = [&options](const Summary& summary, const RunInfo& info) {
    return options.json ? render_json(summary, info) : render_summary(summary, info);
  };
  ClientBroker broker(client, options.from, options.to);
  Replayer replayer(broker, plan);
  ProgressBar bar(std::cerr, isatty(STDERR_FILENO) == 1);

  InterruptScope interrupt_scope;
  g_interrupted = 0;
  try {
    replayer.run([] { return g_interrupted != 0; },
                 [&bar](const Summary& summary) { bar.update(summary); });
  } catch (const Failure& e) {
    bar.finish();
    std::cout << render(replayer.summary(), info) << std::flush;
    std::cerr << kPrefix << e.what() << "; the messages not moved stay in " << options.from
              << " (the broker requeues them as the connection closes)\n";
    return 1;
  }
  bar.finish();
  client.close();

  const Summary& summary = replayer.summary();
  std::cout << render(summary, info) << std::flush;
  if (summary.stop == StopReason::interrupted) return 130;
  return summary.failed > 0 ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::optional<std::string> env_upstream;
  if (const char* value = std::getenv(std::string(kUpstreamEnv).c_str())) env_upstream = value;

  ParsedArgs parsed;
  try {
    parsed = parse_args(argc, argv, env_upstream);
  } catch (const UsageError& e) {
    std::cerr << kPrefix << e.what() << " (see nackguard replay --help)\n";
    return 2;
  } catch (const Failure& e) {
    std::cerr << kPrefix << e.what() << "\n";
    return 1;
  }
  if (parsed.help) {
    std::cout << parsed.usage;
    return 0;
  }
  try {
    return run(parsed.options);
  } catch (const std::exception& e) {
    std::cerr << kPrefix << e.what() << "\n";
    return 1;
  }
}

}  // namespace nackguard::replay
