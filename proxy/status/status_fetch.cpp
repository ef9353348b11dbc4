// fetch() (status_cli.hpp): one HTTP GET on Beast, with a deadline; the URL parsed by Boost.URL.

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/url/parse.hpp>
#include <boost/url/src.hpp>  // Boost.URL in its header-only mode: Debian builds no library
#include <stdexcept>

#include "proxy/status/status_cli.hpp"

namespace nackguard::status {

namespace beast = boost::beast;
namespace http = beast::http;
namespace asio = boost::asio;

namespace {

struct Target {
  std::string host;
  std::string port;
  std::string path;
};

Target parse_target(const std::string& url) {
  auto parsed = boost::urls::parse_uri(url);
  if (!parsed || parsed->scheme() != "http" || parsed->host().empty()) {
    throw std::runtime_error("--url " + url +
                             ": not an http://HOST[:PORT][/PATH] URL (the metrics endpoint, "
                             "metrics.address and metrics.port in the proxy's config)");
  }
  Target target;
  target.host = parsed->encoded_host_address();
  if (target.host.size() > 2 && target.host.front() == '[') {
    target.host = target.host.substr(1, target.host.size() - 2);  // an IPv6 literal
  }
  target.port = parsed->has_port() ? std::string(parsed->port()) : "80";
  target.path = parsed->encoded_path().empty() || parsed->encoded_path() == "/"
                    ? "/status.json"
                    : std::string(parsed->encoded_path());
  return target;
}

}  // namespace

std::string fetch(const std::string& url, std::chrono::milliseconds timeout) {
  const Target target = parse_target(url);
  asio::io_context io;
  beast::tcp_stream stream(io);
  beast::error_code ec;
  asio::ip::tcp::resolver resolver(io);
  auto addresses = resolver.resolve(target.host, target.port, ec);
  if (ec) throw std::runtime_error("cannot resolve " + target.host + ": " + ec.message());
  stream.expires_after(timeout);
  stream.connect(addresses, ec);
  const std::string where = target.host + ":" + target.port;
  if (ec) {
    throw std::runtime_error("cannot connect to " + where + ": " + ec.message() +
                             "; is nackguard running, and is this its metrics.address and "
                             "metrics.port? (in Kubernetes: kubectl port-forward POD 9464)");
  }
  http::request<http::empty_body> request{http::verb::get, target.path, 11};
  request.set(http::field::host, target.host);
  request.set(http::field::user_agent, "nackguard-status");
  request.set(http::field::connection, "close");
  stream.expires_after(timeout);
  http::write(stream, request, ec);
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(16u << 20);
  if (!ec) http::read(stream, buffer, parser, ec);
  if (ec) throw std::runtime_error("no answer from " + where + target.path + ": " + ec.message());
  const auto& response = parser.get();
  if (response.result_int() != 200) {
    throw std::runtime_error(where + target.path + " answered " +
                             std::to_string(response.result_int()) + ": " + response.body() +
                             (response.result_int() == 404
                                  ? " (a nackguard older than /status, or not nackguard)"
                                  : ""));
  }
  return response.body();
}

}  // namespace nackguard::status
