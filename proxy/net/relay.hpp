#pragma once
// One client connection and its upstream broker connection, on one strand (with `threads: 1`,
// on the io_context itself). The relay only moves bytes: it reads from a socket into the
// session, and writes what the session asks for.

#include <array>
#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "proxy/guard/guard.hpp"
#include "proxy/metrics/registry.hpp"
#include "proxy/net/stream.hpp"
#include "proxy/net/tls.hpp"
#include "proxy/net/upstreams.hpp"
#include "proxy/session/session.hpp"

namespace nackguard::net {

struct RelayOptions {
  // The broker addresses, shared by every relay and the server's readiness probes.
  std::shared_ptr<Upstreams> upstreams;
  std::chrono::milliseconds connect_timeout{5000};     // per IP tried, the TLS handshake included
  std::chrono::milliseconds handshake_timeout{10000};  // the client's TLS handshake included
  TlsContexts tls;                                     // no context: plain TCP on that side
  // Output buffered towards one side beyond this stops reading from the other side.
  std::size_t buffer_bytes = 1 << 20;
  session::SessionOptions session;
  // Shared by every connection's guard; nullptr: forward everything, bound nothing.
  retry::GuardContext* guard_context = nullptr;
  metrics::Registry* metrics = nullptr;  // nullptr: nothing counted
  // The io_context runs on one thread only (`threads: 1`): a connection's handlers cannot run
  // at once, so they need no strand, and skip its lock and queue on every completion.
  bool one_thread = false;
};

class Relay : public std::enable_shared_from_this<Relay> {
 public:
  Relay(boost::asio::ip::tcp::socket client, RelayOptions options, std::uint64_t id);

  // Connects upstream, then pumps both ways until both sides are closed.
  boost::asio::awaitable<void> run();
  // Shutdown: after `grace` (or at once if the client is gone), and once pending confirms are
  // in, the client is closed with connection.close 320. Thread-safe.
  void begin_shutdown(std::chrono::milliseconds grace);
  bool finished() const { return done_.load(); }
  boost::asio::any_io_executor executor() { return client_.stream.get_executor(); }

 private:
  using Side = session::Side;
  // The input buffer of each side: above a 64 KiB message with its frames, so that one read
  // can carry several. Reads start at its front, so small messages touch only its first pages.
  static constexpr std::size_t kReadChunk = 256 * 1024;

  struct Endpoint {
    explicit Endpoint(boost::asio::any_io_executor executor)
        : stream(Stream::Tcp(executor)), wake_writer(executor), wake_reader(executor) {}
    Stream stream;
    boost::asio::steady_timer wake_writer;  // cancelled when there is output for this side
    boost::asio::steady_timer wake_reader;  // cancelled when this side's writer drained output
    std::chrono::steady_clock::time_point last_read;
    // TLS only: when a write to this side last ended or was sent directly (see direct_write.hpp).
    std::chrono::steady_clock::time_point last_write;
    std::size_t writing = 0;  // bytes handed to async_write and not yet completed
    // Bytes at the front of the session's output for this side that flush() already sent.
    std::size_t sent_ahead = 0;
    bool direct_writes = false;  // plain TCP: flush() always may send itself (try_send)
    bool closed = false;
  };

  Endpoint& end(Side side) { return side == Side::client ? client_ : broker_; }
  boost::asio::awaitable<bool> accept_tls(const boost::asio::ip::tcp::endpoint& peer);
  boost::asio::awaitable<bool> connect_upstream();
  // Counts the upstream connection in upstream_connections{address} until the relay ends.
  struct UpstreamLease {
    metrics::Registry* metrics = nullptr;
    std::optional<std::size_t> address;
    void release();  // once; later calls do nothing
    ~UpstreamLease() { release(); }
  };
  // Adds what the session counted since the last call to the metrics.
  void report_traffic(Side side);
  boost::asio::awaitable<void> reader(Side side);
  boost::asio::awaitable<void> writer(Side side);
  boost::asio::awaitable<void> watchdog();
  void wake_writers();
  // Hands what the session queued for `side` to the socket: directly from the caller when no
  // write is in flight and the stream is plain TCP, or TLS with the side quiet (one send, no
  // writer wake-up); otherwise, or for what the socket did not take, by waking its writer.
  void flush(Side side);
  // Whether flush() may send to `side` itself now (direct_write.hpp); if so over TLS, the
  // send counts as the side's last write.
  bool may_send_directly(Side side);
  // Whether the reader may write to `side` what the session will forward unchanged before it
  // handles it (Session::receive_input): plain TCP, with nothing in flight towards `side`.
  bool may_send_ahead(Side side);
  void flush_both();
  bool now_ready_to_close() const;
  void close_socket(Side side);
  std::size_t queued_towards(Side side);

  RelayOptions options_;
  std::uint64_t id_;
  Endpoint client_;
  Endpoint broker_;
  UpstreamLease upstream_lease_;
  std::unique_ptr<guard::Guard> guard_;
  session::Session session_;
  std::chrono::steady_clock::time_point started_;
  std::optional<std::chrono::steady_clock::time_point> shutdown_at_;
  std::optional<std::chrono::steady_clock::time_point> close_sent_at_;
  std::chrono::steady_clock::time_point shutdown_forced_at_;
  std::atomic<bool> done_{false};
  std::array<std::uint64_t, 2> reported_frames_{};
  std::array<std::uint64_t, 2> reported_bytes_{};
};

}  // namespace nackguard::net
