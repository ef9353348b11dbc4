#include "proxy/metrics/http_server.hpp"

#include <array>
#include <atomic>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <unordered_map>
#include <vector>

#include "proxy/net/use_tuple.hpp"

namespace nackguard::metrics {

namespace asio = boost::asio;
using net::kUseTuple;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;

namespace {

// After an error response: how long, and how much, to read and drop what the client still
// sends, so that closing does not reset the connection before the client has read the answer.
constexpr auto kMaxLinger = std::chrono::seconds(1);
constexpr std::size_t kMaxLingerBytes = 64 * 1024;
// After a failed accept (out of descriptors, say), wait before the next one.
constexpr auto kAcceptRetry = std::chrono::milliseconds(100);

struct Connection {
  explicit Connection(tcp::socket socket) : stream(std::move(socket)) {}
  beast::tcp_stream stream;
};

// The status to answer a failed read with, or nullopt to close without answering (the client
// left, or was too slow).
std::optional<http::status> status_for(const boost::system::error_code& ec) {
  if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
    return http::status::request_header_fields_too_large;
  }
  if (ec == http::error::body_limit) return http::status::payload_too_large;
  if (ec == http::error::end_of_stream || ec == http::error::partial_message) return std::nullopt;
  if (ec.category() == http::make_error_code(http::error::bad_method).category()) {
    return http::status::bad_request;
  }
  return std::nullopt;
}

http::response<http::string_body> make_response(const HttpReply& reply, unsigned version,
                                                bool keep_alive) {
  http::response<http::string_body> response{static_cast<http::status>(reply.status), version};
  response.set(http::field::server, "nackguard");
  response.set(http::field::content_type, reply.content_type);
  if (reply.status == 405) response.set(http::field::allow, "GET");
  response.keep_alive(keep_alive);
  response.body() = reply.body;
  response.prepare_payload();
  return response;
}

// Half-closes, drains what the client still sends for a moment, then closes.
asio::awaitable<void> close_gracefully(beast::tcp_stream& stream, std::chrono::milliseconds limit) {
  boost::system::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
  stream.expires_after(std::min<std::chrono::milliseconds>(limit, kMaxLinger));
  std::array<char, 4096> sink;
  std::size_t drained = 0;
  while (drained < kMaxLingerBytes) {
    auto [ec, n] = co_await stream.async_read_some(asio::buffer(sink), kUseTuple);
    if (ec) break;
    drained += n;
  }
  stream.close();
}

}  // namespace

struct HttpServer::State {
  State(asio::io_context& io, HttpHandlers handlers, HttpServerOptions options)
      : io(io),
        acceptor(asio::make_strand(io)),
        handlers(std::move(handlers)),
        options(std::move(options)) {}

  void report(const std::string& what) const {
    if (options.on_error) options.on_error(what);
  }

  asio::awaitable<void> accept_loop(std::shared_ptr<State> self);
  asio::awaitable<void> serve(std::shared_ptr<State> self, std::shared_ptr<Connection> connection,
                              std::uint64_t id);
  std::string explain(http::status status, const boost::system::error_code& ec) const;
  asio::awaitable<void> answer_and_close(beast::tcp_stream& stream, unsigned status,
                                         std::string body);

  asio::io_context& io;
  tcp::acceptor acceptor;  // used on its strand only
  tcp::endpoint endpoint;
  const HttpHandlers handlers;
  const HttpServerOptions options;
  std::atomic<std::size_t> open{0};

  std::mutex mutex;  // guards what follows
  bool stopped = false;
  std::uint64_t next_id = 0;
  std::unordered_map<std::uint64_t, std::weak_ptr<Connection>> connections;
};

HttpServer::HttpServer(asio::io_context& io, const std::string& address, std::uint16_t port,
                       HttpHandlers handlers, HttpServerOptions options)
    : state_(std::make_shared<State>(io, std::move(handlers), std::move(options))) {
  const std::string where = address + ":" + std::to_string(port);
  boost::system::error_code ec;
  const auto ip = asio::ip::make_address(address, ec);
  if (ec) throw std::runtime_error("metrics.address \"" + address + "\" is not an IP address");
  const tcp::endpoint endpoint(ip, port);
  tcp::acceptor& acceptor = state_->acceptor;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (!ec) state_->endpoint = acceptor.local_endpoint(ec);
  if (ec) {
    throw std::runtime_error("cannot serve metrics on " + where + ": " + ec.message() +
                             "; choose a free metrics.port or stop what holds it");
  }
}

HttpServer::~HttpServer() {
  stop();
}

void HttpServer::start() {
  asio::co_spawn(state_->acceptor.get_executor(), state_->accept_loop(state_),
                 [state = state_](std::exception_ptr error) {
                   if (!error) return;
                   try {
                     std::rethrow_exception(error);
                   } catch (const std::exception& e) {
                     state->report(std::string("metrics endpoint stopped accepting: ") + e.what());
                   }
                 });
}

void HttpServer::stop() {
  asio::post(state_->acceptor.get_executor(), [state = state_] {
    std::vector<std::shared_ptr<Connection>> open;
    {
      std::lock_guard lock(state->mutex);
      if (state->stopped) return;
      state->stopped = true;
      for (const auto& [id, weak] : state->connections) {
        if (auto connection = weak.lock()) open.push_back(std::move(connection));
      }
    }
    boost::system::error_code ignored;
    state->acceptor.close(ignored);
    for (auto& connection : open) {
      auto executor = connection->stream.get_executor();
      asio::post(executor, [connection = std::move(connection)] { connection->stream.close(); });
    }
  });
}

tcp::endpoint HttpServer::local_endpoint() const {
  return state_->endpoint;
}

std::size_t HttpServer::connections() const {
  return state_->open.load(std::memory_order_relaxed);
}

asio::awaitable<void> HttpServer::State::accept_loop(std::shared_ptr<State> self) {
  while (acceptor.is_open()) {
    auto [ec, socket] = co_await acceptor.async_accept(asio::make_strand(io), kUseTuple);
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
    if (ec) {
      report("metrics endpoint: accept failed: " + ec.message());
      asio::steady_timer pause(acceptor.get_executor(), kAcceptRetry);
      co_await pause.async_wait(kUseTuple);
      continue;
    }
    if (open.load(std::memory_order_relaxed) >= options.max_connections) {
      boost::system::error_code ignored;
      socket.close(ignored);
      continue;
    }
    auto connection = std::make_shared<Connection>(std::move(socket));
    std::uint64_t id = 0;
    {
      std::lock_guard lock(mutex);
      if (stopped) co_return;
      id = ++next_id;
      connections.emplace(id, connection);
    }
    open.fetch_add(1, std::memory_order_relaxed);
    auto executor = connection->stream.get_executor();
    asio::co_spawn(
        executor, serve(self, std::move(connection), id), [self](std::exception_ptr error) {
          if (!error) return;
          try {
            std::rethrow_exception(error);
          } catch (const std::exception& e) {
            self->report(std::string("metrics endpoint: connection ended by: ") + e.what());
          }
        });
  }
}

asio::awaitable<void> HttpServer::State::serve(std::shared_ptr<State> self,
                                               std::shared_ptr<Connection> connection,
                                               std::uint64_t id) {
  struct Deregister {
    State& state;
    std::uint64_t id;
    ~Deregister() {
      std::lock_guard lock(state.mutex);
      state.connections.erase(id);
      state.open.fetch_sub(1, std::memory_order_relaxed);
    }
  } deregister{*self, id};

  beast::tcp_stream& stream = connection->stream;
  // Room for a whole request at its limits, so the parser's limits are what trips first.
  beast::flat_buffer buffer(options.header_limit + options.body_limit + 1024);
  for (;;) {
    http::request_parser<http::string_body> parser;
    parser.header_limit(static_cast<std::uint32_t>(options.header_limit));
    parser.body_limit(options.body_limit);
    stream.expires_after(options.read_timeout);
    auto [read_ec, read_bytes] = co_await http::async_read(stream, buffer, parser, kUseTuple);
    if (read_ec) {
      if (auto status = status_for(read_ec)) {
        co_await answer_and_close(stream, static_cast<unsigned>(*status),
                                  explain(*status, read_ec));
      } else {
        stream.close();
      }
      co_return;
    }
    const auto& request = parser.get();
    const auto method = request.method_string();
    const auto target = request.target();
    const HttpReply reply = route_request(std::string_view(method.data(), method.size()),
                                          std::string_view(target.data(), target.size()), handlers);
    const bool keep_alive = request.keep_alive();
    auto response = make_response(reply, request.version(), keep_alive);
    stream.expires_after(options.write_timeout);
    auto [write_ec, written] = co_await http::async_write(stream, response, kUseTuple);
    if (write_ec) {
      stream.close();
      co_return;
    }
    if (!keep_alive) {
      co_await close_gracefully(stream, options.read_timeout);
      co_return;
    }
  }
}

std::string HttpServer::State::explain(http::status status,
                                       const boost::system::error_code& ec) const {
  switch (status) {
    case http::status::request_header_fields_too_large:
      return "request header fields too large: at most " + std::to_string(options.header_limit) +
             " bytes\n";
    case http::status::payload_too_large:
      return "request body too large: at most " + std::to_string(options.body_limit) + " bytes\n";
    default:
      return "bad request: " + ec.message() + "\n";
  }
}

asio::awaitable<void> HttpServer::State::answer_and_close(beast::tcp_stream& stream,
                                                          unsigned status, std::string body) {
  const HttpReply reply{status, kPlainContentType, std::move(body)};
  auto response = make_response(reply, 11, false);
  stream.expires_after(options.write_timeout);
  auto [ec, written] = co_await http::async_write(stream, response, kUseTuple);
  if (ec) {
    stream.close();
    co_return;
  }
  co_await close_gracefully(stream, options.read_timeout);
}

}  // namespace nackguard::metrics
