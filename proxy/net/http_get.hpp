#pragma once
// One HTTP/1.1 GET on Beast, over TCP or TLS, within a deadline: for the management API
// (net::ManagementClient). A new connection per request, closed after the answer.

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ssl/context.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace nackguard::net {

struct HttpEndpoint {
  std::string host;
  std::uint16_t port = 80;
  // https when set: the server's certificate is checked against `host` as the context says.
  std::shared_ptr<boost::asio::ssl::context> tls;
  bool verify = true;
  std::string authorization;                // the Authorization header; empty: none
  std::chrono::milliseconds timeout{5000};  // the whole request: resolve to the answer's end
};

struct HttpAnswer {
  // Empty when an answer came; else "resolve", "connect", "tls", "timeout" or "read".
  std::string failure_kind;
  std::string failure;  // what went wrong, in the system's or OpenSSL's words
  unsigned status = 0;
  std::string body;
};

// Runs on the calling coroutine's executor. Bodies past 8 MiB are a failure ("read").
boost::asio::awaitable<HttpAnswer> http_get(const HttpEndpoint& server, std::string target);

}  // namespace nackguard::net
