#include "proxy/net/management_client.hpp"

#include <spdlog/spdlog.h>

#include <atomic>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <optional>

#include "proxy/config/duration.hpp"
#include "proxy/net/http_get.hpp"
#include "proxy/net/log_listener.hpp"
#include "proxy/net/management_request.hpp"
#include "proxy/net/tls.hpp"

namespace nackguard::net {

namespace asio = boost::asio;

namespace {

constexpr std::chrono::seconds kTick{1};

std::shared_ptr<asio::ssl::context> tls_context(const config::UpstreamManagement& api) {
  if (!api.https) return nullptr;
  auto context = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_client);
  config::UpstreamTls tls;
  tls.verify = api.verify;
  tls.ca_file = api.ca_file;
  configure_upstream_context(context->native_handle(), tls);
  return context;
}

HttpEndpoint endpoint_of(const config::UpstreamManagement& api) {
  HttpEndpoint server;
  server.host = api.endpoint.host;
  server.port = api.endpoint.port;
  server.tls = tls_context(api);
  server.verify = api.verify;
  server.authorization = basic_authorization(api.username, api.password);
  server.timeout = api.timeout;
  return server;
}

std::string limit_text(const retry::QueueLimit& limit) {
  return (limit.limit ? std::to_string(*limit.limit) : std::string("none")) + " (" +
         std::string(retry::to_string(limit.source)) + ")";
}

metrics::LookupResult result_of(LookupAnswer::Kind kind) {
  switch (kind) {
    case LookupAnswer::Kind::limit:
      return metrics::LookupResult::ok;
    case LookupAnswer::Kind::not_found:
      return metrics::LookupResult::not_found;
    case LookupAnswer::Kind::no_statistics:
      return metrics::LookupResult::no_statistics;
    case LookupAnswer::Kind::failure:
      break;
  }
  return metrics::LookupResult::failed;
}

}  // namespace

struct ManagementClient::State : std::enable_shared_from_this<State> {
  State(asio::io_context& io, const config::UpstreamManagement& api, retry::LearntLimits& limits,
        metrics::Registry* registry, std::function<std::int64_t()> steady_ms)
      : strand(asio::make_strand(io)),
        timer(strand),
        api(api),
        site(site_of(api)),
        server(endpoint_of(api)),
        limits(limits),
        registry(registry),
        steady_ms(std::move(steady_ms)) {}

  asio::awaitable<void> loop();
  // The broker's version, from /api/overview once per refresh interval; nullopt with
  // `failure` set when it cannot be had.
  asio::awaitable<std::optional<retry::BrokerVersion>> version(LookupAnswer& failure);
  void record(const retry::QueueKey& key, const LookupAnswer& answer);

  asio::strand<asio::io_context::executor_type> strand;
  asio::steady_timer timer;
  const config::UpstreamManagement api;
  const ManagementSite site;
  const HttpEndpoint server;
  retry::LearntLimits& limits;
  metrics::Registry* registry;
  const std::function<std::int64_t()> steady_ms;
  std::atomic<bool> stopped{false};
  std::optional<retry::BrokerVersion> broker_version;  // on the strand only
  std::int64_t version_ms = 0;
};

asio::awaitable<std::optional<retry::BrokerVersion>> ManagementClient::State::version(
    LookupAnswer& failure) {
  if (broker_version && steady_ms() - version_ms < api.refresh.count()) co_return broker_version;
  const std::string target = overview_target(api.path_prefix);
  const HttpAnswer answer = co_await http_get(server, target);
  std::string problem;
  if (!answer.failure_kind.empty()) {
    failure = transport_failure(site, answer.failure_kind, answer.failure);
  } else if (answer.status != 200) {
    failure = http_failure(site, target, answer.status, answer.body);
  } else if (auto parsed = retry::read_overview_json(answer.body, problem)) {
    broker_version = parsed;
    version_ms = steady_ms();
    co_return parsed;
  } else {
    failure = bad_response(site, target, problem);
  }
  co_return std::nullopt;
}

void ManagementClient::State::record(const retry::QueueKey& key, const LookupAnswer& answer) {
  if (registry != nullptr) registry->management_lookup(result_of(answer.kind));
  const std::int64_t now = steady_ms();
  const std::string vhost = printable(key.vhost);
  const std::string queue = printable(key.queue);
  retry::RecordChange change;
  switch (answer.kind) {
    case LookupAnswer::Kind::limit:
      change = limits.record(key, answer.limit, now);
      break;
    case LookupAnswer::Kind::not_found:
      change = limits.record_not_found(key, now);
      break;
    case LookupAnswer::Kind::no_statistics:
      limits.record_retry(key, now);
      return;
    case LookupAnswer::Kind::failure:
      change = limits.record_failure(key, answer.failure_kind, answer.failure, now);
      if (change.failure_is_new) {
        spdlog::warn("delivery limit lookup failed: vhost={} queue={}: {}", vhost, queue,
                     answer.failure);
      }
      return;
  }
  if (change.recovered) {
    spdlog::info("delivery limit lookup works again: vhost={} queue={}: {} at {}", vhost, queue,
                 answer.kind == LookupAnswer::Kind::limit ? limit_text(answer.limit)
                                                          : std::string("no such queue"),
                 site.address);
  } else if (change.changed) {
    spdlog::info(
        "delivery limit learnt: vhost={} queue={} type={} limit={} from the management "
        "API at {}",
        vhost, queue, retry::to_string(answer.limit.type), limit_text(answer.limit), site.address);
  }
}

asio::awaitable<void> ManagementClient::State::loop() {
  while (!stopped) {
    timer.expires_after(kTick);
    auto [ec] = co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
    if (stopped || (ec && ec != asio::error::operation_aborted)) co_return;
    std::vector<retry::QueueKey> wanted = limits.take_wanted(kBatch, steady_ms());
    if (wanted.empty()) continue;
    LookupAnswer failure;
    std::optional<retry::BrokerVersion> version = co_await this->version(failure);
    for (const retry::QueueKey& key : wanted) {
      if (!version) {
        record(key, failure);
        continue;
      }
      const std::string target = queue_target(api.path_prefix, key);
      const HttpAnswer answer = co_await http_get(server, target);
      if (!answer.failure_kind.empty()) {
        // The API is out of reach: the rest of the batch fails alike, without waiting.
        failure = transport_failure(site, answer.failure_kind, answer.failure);
        version.reset();
        record(key, failure);
        continue;
      }
      record(key, read_queue_answer(site, target, answer.status, answer.body, *version));
    }
  }
}

void check_management_tls(const config::Config& config) {
  if (config.upstream_management) tls_context(*config.upstream_management);
}

ManagementClient::ManagementClient(asio::io_context& io, const config::UpstreamManagement& api,
                                   retry::LearntLimits& limits, metrics::Registry* registry,
                                   std::function<std::int64_t()> steady_ms)
    : state_(std::make_shared<State>(io, api, limits, registry, std::move(steady_ms))) {}

ManagementClient::~ManagementClient() {
  stop();
}

void ManagementClient::start() {
  spdlog::info("looking delivery limits up in the management API at {} (refreshed every {})",
               state_->site.address, config::format_duration(state_->api.refresh));
  asio::co_spawn(
      state_->strand, [state = state_]() -> asio::awaitable<void> { co_await state->loop(); },
      [](std::exception_ptr error) {
        if (!error) return;
        try {
          std::rethrow_exception(error);
        } catch (const std::exception& e) {
          spdlog::error("management API lookups stopped by an internal error: {}", e.what());
        }
      });
}

void ManagementClient::stop() {
  if (state_->stopped.exchange(true)) return;
  asio::post(state_->strand, [state = state_] { state->timer.cancel(); });
}

}  // namespace nackguard::net
