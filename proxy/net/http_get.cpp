#include "proxy/net/http_get.hpp"

#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

#include "proxy/net/tls.hpp"
#include "proxy/net/use_tuple.hpp"

namespace nackguard::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;
using namespace asio::experimental::awaitable_operators;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::uint64_t kMaxBody = 8u << 20;

HttpAnswer failed(std::string kind, std::string what) {
  HttpAnswer answer;
  answer.failure_kind = std::move(kind);
  answer.failure = std::move(what);
  return answer;
}

// A failed step's error as a kind and words: beast::error::timeout is the deadline's.
HttpAnswer step_failed(const boost::system::error_code& ec, std::string_view kind,
                       std::string_view step) {
  if (ec == beast::error::timeout) return failed("timeout", std::string(step) + " timed out");
  return failed(std::string(kind), std::string(step) + ": " + ec.message());
}

// The request, then the answer, on a connected (and, for https, handshaken) stream.
template <typename Stream>
asio::awaitable<HttpAnswer> exchange(Stream& stream, const HttpEndpoint& server,
                                     std::string target) {
  http::request<http::empty_body> request{http::verb::get, target, 11};
  request.set(http::field::host, server.host);
  request.set(http::field::user_agent, "nackguard");
  request.set(http::field::accept, "application/json");
  request.set(http::field::connection, "close");
  if (!server.authorization.empty()) request.set(http::field::authorization, server.authorization);
  auto [write_error, written] = co_await http::async_write(stream, request, kUseTuple);
  (void)written;
  if (write_error) co_return step_failed(write_error, "read", "sending the request");
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(kMaxBody);
  auto [read_error, read] = co_await http::async_read(stream, buffer, parser, kUseTuple);
  (void)read;
  if (read_error) co_return step_failed(read_error, "read", "reading the answer");
  HttpAnswer answer;
  answer.status = parser.get().result_int();
  answer.body = std::move(parser.get().body());
  co_return answer;
}

// Why a TLS handshake failed, with the certificate check's result when that failed.
std::string handshake_failure(const boost::system::error_code& ec, SSL* ssl) {
  std::string what = "TLS handshake: " + ec.message();
  const long verify = SSL_get_verify_result(ssl);
  if (verify != X509_V_OK) what.append(": ").append(X509_verify_cert_error_string(verify));
  return what;
}

asio::awaitable<HttpAnswer> over_tls(beast::tcp_stream tcp, const HttpEndpoint& server,
                                     std::string target) {
  beast::ssl_stream<beast::tcp_stream> stream(std::move(tcp), *server.tls);
  TlsContexts names;
  names.upstream_verify = server.verify;
  expect_broker_identity(stream.native_handle(), names, server.host);
  auto [ec] = co_await stream.async_handshake(asio::ssl::stream_base::client, kUseTuple);
  if (ec == beast::error::timeout) co_return failed("timeout", "the TLS handshake timed out");
  if (ec) co_return failed("tls", handshake_failure(ec, stream.native_handle()));
  co_return co_await exchange(stream, server, std::move(target));
}

}  // namespace

asio::awaitable<HttpAnswer> http_get(const HttpEndpoint& server, std::string target) {
  const auto executor = co_await asio::this_coro::executor;
  const Clock::time_point deadline = Clock::now() + server.timeout;
  tcp::resolver resolver(executor);
  asio::steady_timer timer(executor, deadline);
  auto resolved =
      co_await (resolver.async_resolve(server.host, std::to_string(server.port), kUseTuple) ||
                timer.async_wait(kUseTuple));
  if (resolved.index() == 1) co_return failed("timeout", "resolving " + server.host + " timed out");
  auto [resolve_error, endpoints] = std::get<0>(std::move(resolved));
  if (resolve_error) {
    co_return failed("resolve", "cannot resolve " + server.host + ": " + resolve_error.message());
  }
  beast::tcp_stream tcp(executor);
  tcp.expires_at(deadline);
  auto [connect_error, endpoint] = co_await tcp.async_connect(endpoints, kUseTuple);
  (void)endpoint;
  if (connect_error) co_return step_failed(connect_error, "connect", "connect");
  if (server.tls) co_return co_await over_tls(std::move(tcp), server, std::move(target));
  HttpAnswer answer = co_await exchange(tcp, server, std::move(target));
  boost::system::error_code ignored;
  tcp.socket().shutdown(tcp::socket::shutdown_both, ignored);
  co_return answer;
}

}  // namespace nackguard::net
