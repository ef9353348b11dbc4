#pragma once
// TLS over a TCP socket with OpenSSL reading and writing the socket itself: records go from
// the socket to OpenSSL's buffer and, decrypted, straight into the caller's buffer (and the
// other way), where Asio's ssl::stream copies each byte twice more through a BIO pair and
// yields one record per read. Asio only waits for the socket to be ready.
//
// One read and one write may be in progress at once (the relay's reader and writer), on one
// strand or one thread: each OpenSSL call runs to its end before the other starts.

#include <openssl/ssl.h>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream_base.hpp>
#include <boost/system/error_code.hpp>
#include <cstddef>
#include <memory>
#include <tuple>

namespace nackguard::net {

class TlsStream {
 public:
  using Tcp = boost::asio::ip::tcp::socket;
  using Result = std::tuple<boost::system::error_code, std::size_t>;

  // Takes the connected socket; nothing is sent until handshake().
  TlsStream(Tcp socket, boost::asio::ssl::context& context);
  TlsStream(const TlsStream&) = delete;
  TlsStream& operator=(const TlsStream&) = delete;

  Tcp& next_layer() { return socket_; }
  SSL* native_handle() { return ssl_.get(); }

  // Errors as Asio's ssl::stream gives them: OpenSSL's in asio::error::get_ssl_category(),
  // asio::error::eof after the peer's close_notify, asio::ssl::error::stream_truncated when
  // the connection ended without one.
  boost::asio::awaitable<boost::system::error_code> handshake(
      boost::asio::ssl::stream_base::handshake_type type);
  // At least one byte, and as many as the records already received hold, up to `size`.
  boost::asio::awaitable<Result> read_some(void* data, std::size_t size);
  // All of it, unless an error comes first (then what was written).
  boost::asio::awaitable<Result> write(const void* data, std::size_t size);
  // Sends close_notify, without waiting for the peer's: that one reaches the reader as eof.
  boost::asio::awaitable<boost::system::error_code> shutdown();
  // Received and not yet handed out: decrypted bytes, or records in OpenSSL's buffer.
  bool holds_input() const;
  // Writes what the socket takes now, without waiting: whole records (a record cut by a full
  // socket is finished by the next write, which must start with the same bytes).
  std::size_t try_send(const void* data, std::size_t size, boost::system::error_code& ec);

 private:
  struct FreeSsl {
    void operator()(SSL* ssl) const { SSL_free(ssl); }
  };
  // What the socket must become before the OpenSSL call that returned `result` can go on, or
  // the error it ended with. `sys_errno` is errno right after that call, read by the caller
  // before this coroutine's frame is allocated.
  boost::asio::awaitable<boost::system::error_code> wait_or_fail(int result, int sys_errno);
  // SSL_write_ex from bytes[total] on, `total` advanced, until all `size` bytes are written
  // (result 1) or a write fails: its result, and errno right after it.
  struct WriteStop {
    int result = 1;
    int sys_errno = 0;
  };
  WriteStop write_records(const unsigned char* bytes, std::size_t size, std::size_t& total);

  Tcp socket_;
  std::unique_ptr<SSL, FreeSsl> ssl_;
};

}  // namespace nackguard::net
