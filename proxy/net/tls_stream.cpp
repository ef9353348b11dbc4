#include "proxy/net/tls_stream.hpp"

#include <sys/socket.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cerrno>
#include <cstdint>
#include <new>

#include "proxy/net/use_tuple.hpp"

namespace nackguard::net {

namespace asio = boost::asio;

namespace {

// OpenSSL reads ahead into a buffer this large, so that one recv takes a burst of records.
constexpr std::size_t kReadAhead = 64 * 1024;

int socket_of(BIO* bio) {
  return static_cast<int>(reinterpret_cast<std::intptr_t>(BIO_get_data(bio)));
}

// The socket BIO's writes, with MSG_NOSIGNAL: a peer that is gone is an error, not SIGPIPE.
int bio_write(BIO* bio, const char* data, std::size_t size, std::size_t* written) {
  BIO_clear_retry_flags(bio);
  ssize_t n = ::send(socket_of(bio), data, size, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n >= 0) {
    *written = static_cast<std::size_t>(n);
    return 1;
  }
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) BIO_set_retry_write(bio);
  return 0;
}

int bio_read(BIO* bio, char* data, std::size_t size, std::size_t* read) {
  BIO_clear_retry_flags(bio);
  ssize_t n = ::recv(socket_of(bio), data, size, MSG_DONTWAIT);
  if (n > 0) {
    *read = static_cast<std::size_t>(n);
    return 1;
  }
  if (n == 0) {
    BIO_set_flags(bio, BIO_FLAGS_IN_EOF);  // BIO_eof: OpenSSL tells a truncation by it
  } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
    BIO_set_retry_read(bio);
  }
  return 0;
}

long bio_ctrl(BIO* bio, int command, long, void*) {
  switch (command) {
    case BIO_CTRL_FLUSH:
      return 1;
    case BIO_CTRL_EOF:
      return BIO_test_flags(bio, BIO_FLAGS_IN_EOF) != 0 ? 1 : 0;
    default:
      return 0;
  }
}

BIO_METHOD* socket_method() {
  static BIO_METHOD* method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "nackguard socket");
    if (m == nullptr || BIO_meth_set_write_ex(m, bio_write) != 1 ||
        BIO_meth_set_read_ex(m, bio_read) != 1 || BIO_meth_set_ctrl(m, bio_ctrl) != 1) {
      throw std::bad_alloc();
    }
    return m;
  }();
  return method;
}

// An OpenSSL call's failure as Asio's ssl::stream reports it. Never an empty code.
boost::system::error_code failure(int ssl_error, int sys_errno) {
  const unsigned long queued = ERR_get_error();
  switch (ssl_error) {
    case SSL_ERROR_ZERO_RETURN:
      return asio::error::eof;
    case SSL_ERROR_SSL:
      if (ERR_GET_REASON(queued) == SSL_R_UNEXPECTED_EOF_WHILE_READING) {
        return asio::ssl::error::stream_truncated;
      }
      break;
    case SSL_ERROR_SYSCALL:
      if (queued == 0) {
        if (sys_errno != 0) return {sys_errno, asio::error::get_system_category()};
        return asio::ssl::error::stream_truncated;
      }
      break;
    default:
      break;
  }
  if (queued == 0) return asio::ssl::error::unspecified_system_error;
  return {static_cast<int>(queued), asio::error::get_ssl_category()};
}

}  // namespace

TlsStream::TlsStream(Tcp socket, asio::ssl::context& context)
    : socket_(std::move(socket)), ssl_(SSL_new(context.native_handle())) {
  if (!ssl_) throw std::bad_alloc();
  BIO* bio = BIO_new(socket_method());
  if (bio == nullptr) throw std::bad_alloc();
  BIO_set_data(bio, reinterpret_cast<void*>(static_cast<std::intptr_t>(socket_.native_handle())));
  BIO_set_init(bio, 1);
  SSL_set_bio(ssl_.get(), bio, bio);
  SSL_set_mode(ssl_.get(), SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  SSL_set_read_ahead(ssl_.get(), 1);
  SSL_set_default_read_buffer_len(ssl_.get(), kReadAhead);
}

asio::awaitable<boost::system::error_code> TlsStream::wait_or_fail(int result, int sys_errno) {
  const int ssl_error = SSL_get_error(ssl_.get(), result);
  if (ssl_error != SSL_ERROR_WANT_READ && ssl_error != SSL_ERROR_WANT_WRITE) {
    co_return failure(ssl_error, sys_errno);
  }
  auto [ec] = co_await socket_.async_wait(
      ssl_error == SSL_ERROR_WANT_READ ? Tcp::wait_read : Tcp::wait_write, kUseTuple);
  co_return ec;  // empty: ready, call again
}

asio::awaitable<boost::system::error_code> TlsStream::handshake(
    asio::ssl::stream_base::handshake_type type) {
  if (type == asio::ssl::stream_base::client) {
    SSL_set_connect_state(ssl_.get());
  } else {
    SSL_set_accept_state(ssl_.get());
  }
  for (;;) {
    ERR_clear_error();
    const int result = SSL_do_handshake(ssl_.get());
    if (result == 1) co_return boost::system::error_code{};
    if (auto ec = co_await wait_or_fail(result, errno)) co_return ec;
  }
}

asio::awaitable<TlsStream::Result> TlsStream::read_some(void* data, std::size_t size) {
  auto* bytes = static_cast<unsigned char*>(data);
  std::size_t total = 0;
  while (total < size) {
    ERR_clear_error();
    std::size_t n = 0;
    const int result = SSL_read_ex(ssl_.get(), bytes + total, size - total, &n);
    if (result == 1) {
      total += n;
      continue;
    }
    // What came so far goes out now; an error comes back on the next call.
    if (total > 0) break;
    if (auto ec = co_await wait_or_fail(result, errno)) co_return Result{ec, 0};
  }
  co_return Result{boost::system::error_code{}, total};
}

TlsStream::WriteStop TlsStream::write_records(const unsigned char* bytes, std::size_t size,
                                              std::size_t& total) {
  while (total < size) {
    ERR_clear_error();
    std::size_t n = 0;
    const int result = SSL_write_ex(ssl_.get(), bytes + total, size - total, &n);
    if (result != 1) return WriteStop{result, errno};
    total += n;
  }
  return WriteStop{};
}

asio::awaitable<TlsStream::Result> TlsStream::write(const void* data, std::size_t size) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  std::size_t total = 0;
  for (;;) {
    const WriteStop stop = write_records(bytes, size, total);
    if (stop.result == 1) break;
    if (auto ec = co_await wait_or_fail(stop.result, stop.sys_errno)) co_return Result{ec, total};
  }
  co_return Result{boost::system::error_code{}, total};
}

// Only the close_notify: the peer's comes to the reader, as the end of its input.
asio::awaitable<boost::system::error_code> TlsStream::shutdown() {
  if (!SSL_is_init_finished(ssl_.get())) co_return boost::system::error_code{};
  for (;;) {
    ERR_clear_error();
    const int result = SSL_shutdown(ssl_.get());
    if (result >= 0) co_return boost::system::error_code{};
    if (auto ec = co_await wait_or_fail(result, errno)) co_return ec;
  }
}

std::size_t TlsStream::try_send(const void* data, std::size_t size, boost::system::error_code& ec) {
  ec.clear();
  const auto* bytes = static_cast<const unsigned char*>(data);
  std::size_t total = 0;
  const WriteStop stop = write_records(bytes, size, total);
  if (stop.result == 1) return total;
  // A failure after whole records were sent is met by the next write: what was sent counts.
  const int error = SSL_get_error(ssl_.get(), stop.result);
  if (error != SSL_ERROR_WANT_WRITE && error != SSL_ERROR_WANT_READ && total == 0) {
    ec = boost::asio::error::broken_pipe;
  }
  return total;
}

bool TlsStream::holds_input() const {
  return SSL_has_pending(ssl_.get()) == 1;
}

}  // namespace nackguard::net
