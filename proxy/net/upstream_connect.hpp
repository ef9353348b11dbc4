#pragma once
// Connecting to the broker: a client connection's upstream connection, tried over every
// address the picker plans and every IP each name resolves to; and the readiness probe of one
// address. Only Asio here; the choice of addresses is AddressPicker's.

#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/ip/tcp.hpp>

#include "proxy/metrics/registry.hpp"
#include "proxy/net/stream.hpp"
#include "proxy/net/tls.hpp"
#include "proxy/net/upstreams.hpp"

namespace nackguard::net {

struct UpstreamConnectOptions {
  Upstreams* upstreams = nullptr;
  // Per IP address tried: the TCP connect and the TLS handshake together.
  std::chrono::milliseconds connect_timeout{5000};
  const TlsContexts* tls = nullptr;      // no upstream context: plain TCP
  metrics::Registry* metrics = nullptr;  // nullptr: nothing counted
};

// Connects `stream` (plain TCP, not connected) to the first address of the plan that accepts,
// TLS included, and returns its index. Each address that fails is logged, counted in
// upstream_connect_failures_total{address} and reported to the picker; when all fail, the
// give-up is counted in upstream_unavailable_total and nullopt returned. `conn` names the
// client connection in log lines.
boost::asio::awaitable<std::optional<std::size_t>> connect_upstream(
    Stream& stream, const UpstreamConnectOptions& options, std::uint64_t conn);

// The IP addresses one address resolved to, in turn: the TCP connect and the TLS handshake
// (when configured) within connect_timeout each. True when `stream` is connected; the
// failures are logged (the TCP ones in one line naming each IP address and why).
boost::asio::awaitable<bool> connect_endpoints(
    Stream& stream, const UpstreamAddress& address,
    const std::vector<boost::asio::ip::tcp::endpoint>& endpoints,
    const UpstreamConnectOptions& options, std::uint64_t conn);

// A bare TCP connect to any IP of `address` within `timeout`, closed at once: nullopt when it
// was accepted, else why not (for /readyz).
boost::asio::awaitable<std::optional<std::string>> probe_address(const UpstreamAddress& address,
                                                                 std::chrono::milliseconds timeout);

}  // namespace nackguard::net
