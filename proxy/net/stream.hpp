#pragma once
// One side's byte stream: a TCP socket, or TLS over one. The relay reads and writes through a
// Stream on both sides and never needs to know which it is.

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream_base.hpp>
#include <chrono>
#include <cstddef>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <variant>

#include "proxy/net/tls.hpp"
#include "proxy/net/tls_stream.hpp"

namespace nackguard::net {

// async_write's completion condition for the relay's writers. Asio's transfer_all hands the
// stream at most 64 KiB per write_some (a send() each); this offers everything left, as the
// relay's direct sends do: a 1 MiB message left for the writer then takes a few send() calls
// instead of 16 or more, and its CPU fell by a third (docs/performance.md).
inline std::size_t transfer_everything_left(const boost::system::error_code& ec, std::size_t) {
  return ec ? 0 : std::numeric_limits<std::size_t>::max();
}

// Why a TLS handshake did not complete.
struct HandshakeFailure {
  bool timed_out = false;
  // The peer hung up without a word, as a TCP health check does.
  bool peer_closed = false;
  std::string reason;  // describe_handshake_error's text; empty when timed out
};

class Stream {
 public:
  using executor_type = boost::asio::any_io_executor;
  using Tcp = boost::asio::ip::tcp::socket;
  using Tls = TlsStream;
  using Result = std::tuple<boost::system::error_code, std::size_t>;

  explicit Stream(Tcp socket) : stream_(std::in_place_type<Tcp>, std::move(socket)) {}

  executor_type get_executor() { return tcp().get_executor(); }
  // The TCP connection underneath: for connect, options, addresses.
  Tcp& tcp();
  // nullptr while the stream is plain TCP.
  Tls* tls() { return std::get_if<Tls>(&stream_); }
  // TLS only: bytes read from the socket and not yet decrypted and handed out (the next
  // records of a burst). Plain TCP: false.
  bool holds_input();

  // Closes the stream and puts a fresh, unconnected TCP socket in its place (TLS dropped):
  // for the next upstream address after a failed attempt.
  void reset();
  // Puts TLS over the TCP connection, before any byte has been read or written.
  Tls& start_tls(boost::asio::ssl::context& context);
  // The TLS handshake, given up at `deadline`; nullopt when it completed.
  boost::asio::awaitable<std::optional<HandshakeFailure>> handshake(
      boost::asio::ssl::stream_base::handshake_type type,
      std::chrono::steady_clock::time_point deadline, TlsPeer peer);

  // At least one byte, up to `size`; over TLS, as many as the records already received hold.
  boost::asio::awaitable<Result> read_some(void* data, std::size_t size);
  // Every byte, unless an error comes first (then the bytes written before it). Over plain
  // TCP each send is offered everything left (transfer_everything_left).
  boost::asio::awaitable<Result> write(const void* data, std::size_t size);

  // Sends what the socket takes at once, without waiting and without changing the socket's
  // mode (MSG_DONTWAIT), so that every Asio backend sees the socket as Asio left it (io_uring's
  // reads try no speculative read on a blocking socket). Returns the bytes sent: 0 when the
  // socket takes nothing now; `ec` is set on a failure. Over TLS it counts whole records only:
  // a record the socket cut stays in OpenSSL, and the next write must start with the bytes
  // after the count (TlsStream::try_send).
  std::size_t try_send(const void* data, std::size_t size, boost::system::error_code& ec);

  // Nothing more will be sent: with TLS a close_notify first (waiting at most `limit` for the
  // socket to take it), then the TCP FIN. Reading goes on: the peer's close_notify comes as
  // the end of the input.
  boost::asio::awaitable<void> shutdown_send(std::chrono::milliseconds limit);
  // Both ways at once, without a close_notify; errors are ignored, so it is safe twice.
  void close();

 private:
  std::variant<Tcp, Tls> stream_;
};

}  // namespace nackguard::net
