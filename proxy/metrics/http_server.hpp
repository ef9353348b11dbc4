#pragma once
// The metrics endpoint over HTTP/1.1 (Boost.Beast): GET /metrics, /healthz and /readyz (see
// http_routes.hpp). Each connection is one coroutine on its own strand, with keep-alive, a
// bounded header (431) and body (413), a deadline for each whole request so slow clients are
// cut off, malformed requests answered 400 and closed, and a cap on open connections beyond
// which a new one is closed at once.

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "proxy/metrics/http_routes.hpp"

namespace nackguard::metrics {

struct HttpServerOptions {
  // A request, headers and body, must arrive whole within this after the previous response (or
  // the connect): it also bounds how long an idle keep-alive connection stays open.
  std::chrono::milliseconds read_timeout{10000};
  std::chrono::milliseconds write_timeout{10000};
  std::size_t header_limit = 8 * 1024;  // bytes of request line and headers; beyond: 431
  std::size_t body_limit = 1024;        // beyond: 413
  std::size_t max_connections = 64;     // a connection beyond this many is closed at once
  // Told of failures nobody else sees (accept errors such as running out of descriptors, an
  // exception escaping a connection). Unset: they are dropped. Called from worker threads.
  std::function<void(const std::string&)> on_error;
};

class HttpServer {
 public:
  // Binds and listens (port 0: an ephemeral port, see local_endpoint()). Throws
  // std::runtime_error naming address:port if that fails.
  HttpServer(boost::asio::io_context& io, const std::string& address, std::uint16_t port,
             HttpHandlers handlers, HttpServerOptions options = {});
  // Calls stop(). Destroy it before its io_context.
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  void start();
  // Stops accepting and closes every open connection. Thread-safe; a second call does nothing.
  void stop();

  boost::asio::ip::tcp::endpoint local_endpoint() const;
  // Connections open now.
  std::size_t connections() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace nackguard::metrics
