#include "proxy/net/stream.hpp"

#include <sys/socket.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <cerrno>

#include "proxy/net/use_tuple.hpp"

namespace nackguard::net {

namespace asio = boost::asio;
using namespace asio::experimental::awaitable_operators;

Stream::Tcp& Stream::tcp() {
  if (Tls* secure = tls()) return secure->next_layer();
  return std::get<Tcp>(stream_);
}

void Stream::reset() {
  close();
  executor_type executor = get_executor();
  stream_.emplace<Tcp>(executor);
}

Stream::Tls& Stream::start_tls(asio::ssl::context& context) {
  Tcp socket = std::move(std::get<Tcp>(stream_));
  // OpenSSL reads and writes the socket itself, without waiting (TlsStream's BIO).
  boost::system::error_code ignored;
  socket.non_blocking(true, ignored);
  return stream_.emplace<Tls>(std::move(socket), context);
}

asio::awaitable<std::optional<HandshakeFailure>> Stream::handshake(
    asio::ssl::stream_base::handshake_type type, std::chrono::steady_clock::time_point deadline,
    TlsPeer peer) {
  Tls* secure = tls();
  if (secure == nullptr) co_return std::nullopt;
  asio::steady_timer timer(get_executor(), deadline);
  auto result = co_await (secure->handshake(type) || timer.async_wait(kUseTuple));
  HandshakeFailure failure;
  if (result.index() == 1) {
    failure.timed_out = true;
    co_return failure;
  }
  boost::system::error_code error = std::get<0>(result);
  if (!error) co_return std::nullopt;
  failure.peer_closed = error == asio::ssl::error::stream_truncated || error == asio::error::eof;
  failure.reason = describe_handshake_error(error, secure->native_handle(), peer);
  co_return failure;
}

asio::awaitable<void> Stream::shutdown_send(std::chrono::milliseconds limit) {
  if (Tls* secure = tls()) {
    asio::steady_timer timer(get_executor(), limit);
    co_await (secure->shutdown() || timer.async_wait(kUseTuple));
  }
  boost::system::error_code ignored;
  tcp().shutdown(Tcp::shutdown_send, ignored);
}

asio::awaitable<Stream::Result> Stream::read_some(void* data, std::size_t size) {
  if (Tls* secure = tls()) co_return co_await secure->read_some(data, size);
  co_return co_await tcp().async_read_some(asio::buffer(data, size), kUseTuple);
}

asio::awaitable<Stream::Result> Stream::write(const void* data, std::size_t size) {
  if (Tls* secure = tls()) co_return co_await secure->write(data, size);
  co_return co_await asio::async_write(tcp(), asio::buffer(data, size), transfer_everything_left,
                                       kUseTuple);
}

std::size_t Stream::try_send(const void* data, std::size_t size, boost::system::error_code& ec) {
  if (Tls* secure = tls()) return secure->try_send(data, size, ec);
  ec.clear();
  ssize_t n = ::send(tcp().native_handle(), data, size, MSG_DONTWAIT | MSG_NOSIGNAL);
  if (n >= 0) return static_cast<std::size_t>(n);
  if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
    ec.assign(errno, boost::asio::error::get_system_category());
  }
  return 0;
}

bool Stream::holds_input() {
  Tls* secure = tls();
  return secure != nullptr && secure->holds_input();
}

void Stream::close() {
  boost::system::error_code ignored;
  Tcp& socket = tcp();
  socket.shutdown(Tcp::shutdown_both, ignored);
  socket.close(ignored);
}

}  // namespace nackguard::net
