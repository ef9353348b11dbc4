#include "proxy/net/upstream_connect.hpp"
#include "proxy/net/use_tuple.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace nackguard::net {

namespace asio = boost::asio;
using asio::ip::tcp;
using namespace asio::experimental::awaitable_operators;
using Clock = std::chrono::steady_clock;

namespace {

struct Resolved {
  tcp::resolver::results_type endpoints;
  std::optional<std::string> problem;
};

asio::awaitable<Resolved> resolve(const UpstreamAddress& address) {
  tcp::resolver resolver(co_await asio::this_coro::executor);
  auto [ec, endpoints] =
      co_await resolver.async_resolve(address.host, std::to_string(address.port), kUseTuple);
  Resolved out;
  if (ec) {
    out.problem = "cannot resolve upstream " + address.name + ": " + ec.message();
  } else {
    out.endpoints = std::move(endpoints);
  }
  co_return out;
}

// A TCP connect to one IP, given up at `deadline`; nullopt when connected.
asio::awaitable<std::optional<std::string>> connect_tcp(tcp::socket& socket,
                                                        const tcp::endpoint& endpoint,
                                                        Clock::time_point deadline) {
  asio::steady_timer timer(socket.get_executor(), deadline);
  auto result = co_await (socket.async_connect(endpoint, kUseTuple) || timer.async_wait(kUseTuple));
  if (result.index() == 1) co_return std::string("timed out");
  auto [ec] = std::get<0>(result);
  if (ec) co_return ec.message();
  co_return std::nullopt;
}

// The TLS handshake over a connected `stream`, within `deadline`; logged when it fails.
asio::awaitable<bool> handshake(Stream& stream, const UpstreamAddress& address,
                                const UpstreamConnectOptions& options, Clock::time_point deadline,
                                std::uint64_t conn) {
  expect_broker_identity(stream.start_tls(*options.tls->upstream).native_handle(), *options.tls,
                         address.host);
  auto failure =
      co_await stream.handshake(asio::ssl::stream_base::client, deadline, TlsPeer::broker);
  if (!failure) co_return true;
  if (failure->timed_out) {
    spdlog::warn(
        "conn {}: the TLS handshake with upstream {} did not complete within {} ms "
        "(upstream.connect_timeout)",
        conn, address.name, options.connect_timeout.count());
  } else {
    spdlog::warn("conn {}: TLS handshake with upstream {} failed: {}", conn, address.name,
                 failure->reason);
  }
  co_return false;
}

// One address: its name resolved, then connect_endpoints.
asio::awaitable<bool> try_address(Stream& stream, const UpstreamAddress& address,
                                  const UpstreamConnectOptions& options, std::uint64_t conn) {
  Resolved resolved = co_await resolve(address);
  if (resolved.problem) {
    spdlog::warn("conn {}: {}; check {}", conn, *resolved.problem, options.upstreams->config_key());
    co_return false;
  }
  std::vector<tcp::endpoint> endpoints;
  for (const auto& entry : resolved.endpoints) endpoints.push_back(entry.endpoint());
  co_return co_await connect_endpoints(stream, address, endpoints, options, conn);
}

}  // namespace

asio::awaitable<bool> connect_endpoints(Stream& stream, const UpstreamAddress& address,
                                        const std::vector<tcp::endpoint>& endpoints,
                                        const UpstreamConnectOptions& options, std::uint64_t conn) {
  std::string refused;  // "IP: why" of each IP whose TCP connect failed
  for (const tcp::endpoint& endpoint : endpoints) {
    stream.reset();
    const auto deadline = Clock::now() + options.connect_timeout;
    std::optional<std::string> problem = co_await connect_tcp(stream.tcp(), endpoint, deadline);
    if (problem) {
      if (*problem == "timed out") {
        *problem = "timed out after " + std::to_string(options.connect_timeout.count()) +
                   " ms (upstream.connect_timeout)";
      }
      if (!refused.empty()) refused += ", ";
      refused +=
          endpoint.address().to_string() + ":" + std::to_string(endpoint.port()) + ": " + *problem;
      continue;
    }
    boost::system::error_code ignored;
    stream.tcp().set_option(tcp::no_delay(true), ignored);
    if (!options.tls || !options.tls->upstream ||
        co_await handshake(stream, address, options, deadline, conn)) {
      co_return true;
    }
  }
  stream.reset();
  if (!refused.empty()) {
    spdlog::warn("conn {}: cannot connect to upstream {} ({}); is the broker up?", conn,
                 address.name, refused);
  } else if (endpoints.empty()) {
    spdlog::warn("conn {}: upstream {} resolves to no address; check {}", conn, address.name,
                 options.upstreams->config_key());
  }
  co_return false;
}

asio::awaitable<std::optional<std::size_t>> connect_upstream(Stream& stream,
                                                             const UpstreamConnectOptions& options,
                                                             std::uint64_t conn) {
  Upstreams& upstreams = *options.upstreams;
  const std::vector<std::size_t> plan = upstreams.picker().plan();
  for (std::size_t i : plan) {
    const UpstreamAddress& address = upstreams.addresses()[i];
    if (co_await try_address(stream, address, options, conn)) {
      upstreams.picker().succeeded(i);
      spdlog::debug("conn {}: connected to upstream {}", conn, address.name);
      co_return i;
    }
    upstreams.picker().failed(i);
    if (options.metrics) options.metrics->upstream_connect_failed(i);
  }
  if (options.metrics) options.metrics->upstream_unavailable();
  if (upstreams.addresses().size() > 1) {
    std::string skipped;
    for (std::size_t i = 0; i < upstreams.addresses().size(); ++i) {
      if (std::find(plan.begin(), plan.end(), i) != plan.end()) continue;
      if (!skipped.empty()) skipped += ", ";
      skipped += upstreams.addresses()[i].name;
    }
    spdlog::warn(
        "conn {}: no upstream address accepted the connection ({} tried{}{}); closing "
        "the client",
        conn, plan.size(), skipped.empty() ? "" : "; skipped after a recent failure: ", skipped);
  }
  co_return std::nullopt;
}

asio::awaitable<std::optional<std::string>> probe_address(const UpstreamAddress& address,
                                                          std::chrono::milliseconds timeout) {
  Resolved resolved = co_await resolve(address);
  if (resolved.problem) co_return resolved.problem;
  tcp::socket socket(co_await asio::this_coro::executor);
  std::string last = "the name resolves to no address";
  for (const auto& entry : resolved.endpoints) {
    const tcp::endpoint endpoint = entry.endpoint();
    boost::system::error_code ignored;
    socket.close(ignored);
    std::optional<std::string> problem =
        co_await connect_tcp(socket, endpoint, Clock::now() + timeout);
    if (!problem) co_return std::nullopt;
    last = *problem == "timed out" ? "did not answer within upstream.connect_timeout"
                                   : "does not answer: " + *problem;
  }
  co_return "upstream " + address.name + " " + last;
}

}  // namespace nackguard::net
