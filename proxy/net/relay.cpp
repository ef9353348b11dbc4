#include "proxy/net/relay.hpp"

#include "proxy/net/connection_seed.hpp"
#include "proxy/net/direct_write.hpp"
#include "proxy/net/upstream_connect.hpp"
#include "proxy/net/use_tuple.hpp"

#include <spdlog/spdlog.h>

#include <utility>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace nackguard::net {

namespace asio = boost::asio;
using asio::ip::tcp;
using namespace asio::experimental::awaitable_operators;
using session::other;
using Clock = std::chrono::steady_clock;

namespace {
// After sending its last bytes to a side, how long to wait for the peer to hang up before
// closing: closing with unread input would reset the connection and could lose our close.
constexpr auto kLinger = std::chrono::seconds(1);
constexpr auto kWatchdogTick = std::chrono::milliseconds(500);
// How long a client may take to answer the proxy's own connection.close at shutdown.
constexpr auto kCloseOkWait = std::chrono::seconds(5);
// How many times a writer lets the other side's reader go first (see Relay::writer).
constexpr int kRecordWaits = 16;
}  // namespace

Relay::Relay(tcp::socket client, RelayOptions options, std::uint64_t id)
    : options_(std::move(options)),
      id_(id),
      client_(client.get_executor()),
      broker_(client.get_executor()),
      guard_(options_.guard_context
                 ? std::make_unique<guard::Guard>(*options_.guard_context, connection_seed(id))
                 : nullptr),
      session_(options_.guard_context ? guard::guarded(options_.session, *options_.guard_context)
                                      : options_.session,
               guard_.get()),
      started_(Clock::now()) {
  client_.stream.tcp() = std::move(client);
}

asio::awaitable<void> Relay::run() {
  auto keep_alive = shared_from_this();
  boost::system::error_code ec;
  client_.stream.tcp().set_option(tcp::no_delay(true), ec);
  tcp::endpoint peer = client_.stream.tcp().remote_endpoint(ec);
  spdlog::debug("conn {}: accepted from {}:{}", id_, peer.address().to_string(), peer.port());
  bool connected = co_await accept_tls(peer);
  // Failures are logged and counted per address by connect_upstream.
  if (connected && !co_await connect_upstream()) connected = false;
  if (!connected) {
    close_socket(Side::client);
    done_ = true;
    co_return;
  }
  client_.last_read = broker_.last_read = Clock::now();
  // Over plain TCP, flush() sends without waiting (Stream::try_send). Over TLS only a lone
  // message does (may_send_directly): sending every read directly cut the added p50 latency
  // but cost a fifth of the consume rate (docs/performance.md, run Y).
  for (Endpoint* e : {&client_, &broker_}) e->direct_writes = e->stream.tls() == nullptr;
  co_await (reader(Side::client) && reader(Side::broker) && writer(Side::client) &&
            writer(Side::broker) && watchdog());
  upstream_lease_.release();
  if (guard_) guard_->on_connection_end();
  done_ = true;
  const auto& stats = session_.stats();
  spdlog::debug("conn {}: closed; client sent {} frames, broker sent {} frames", id_,
                stats.frames[0], stats.frames[1]);
}

void Relay::begin_shutdown(std::chrono::milliseconds grace) {
  asio::post(client_.stream.get_executor(), [self = shared_from_this(), grace] {
    if (self->shutdown_at_) return;
    auto now = Clock::now();
    self->shutdown_at_ = now + grace;
    // Confirms that never come are given up after their own timeout; do not wait longer.
    self->shutdown_forced_at_ = now + grace + std::chrono::seconds(35);
  });
}

// Before any AMQP byte, within timeouts.handshake counted from the accept.
asio::awaitable<bool> Relay::accept_tls(const tcp::endpoint& peer) {
  if (!options_.tls.listen) co_return true;
  client_.stream.start_tls(*options_.tls.listen);
  auto failure = co_await client_.stream.handshake(
      asio::ssl::stream_base::server, started_ + options_.handshake_timeout, TlsPeer::client);
  if (!failure) co_return true;
  std::string from = peer.address().to_string() + ":" + std::to_string(peer.port());
  if (failure->timed_out) {
    spdlog::info(
        "conn {}: closed: the TLS handshake with client {} did not complete within {} ms "
        "(timeouts.handshake)",
        id_, from, options_.handshake_timeout.count());
  } else if (failure->peer_closed) {
    // A TCP health check, most likely: not worth a warning every few seconds.
    spdlog::debug("conn {}: client {} closed the connection during the TLS handshake", id_, from);
  } else {
    spdlog::warn("conn {}: TLS handshake with client {} failed: {}", id_, from, failure->reason);
  }
  co_return false;
}

void Relay::report_traffic(Side side) {
  if (!options_.metrics) return;
  const session::SessionStats& stats = session_.stats();
  auto i = static_cast<std::size_t>(side);
  options_.metrics->add_traffic(side == Side::client ? metrics::Direction::client_to_broker
                                                     : metrics::Direction::broker_to_client,
                                stats.frames[i] - reported_frames_[i],
                                stats.bytes[i] - reported_bytes_[i]);
  reported_frames_[i] = stats.frames[i];
  reported_bytes_[i] = stats.bytes[i];
}

asio::awaitable<bool> Relay::connect_upstream() {
  UpstreamConnectOptions connect;
  connect.upstreams = options_.upstreams.get();
  connect.connect_timeout = options_.connect_timeout;
  connect.tls = &options_.tls;
  connect.metrics = options_.metrics;
  std::optional<std::size_t> address = co_await net::connect_upstream(broker_.stream, connect, id_);
  if (!address) co_return false;
  upstream_lease_.metrics = options_.metrics;
  upstream_lease_.address = address;
  if (options_.metrics) options_.metrics->upstream_connected(*address);
  co_return true;
}

void Relay::UpstreamLease::release() {
  if (metrics && address) metrics->upstream_disconnected(*address);
  address.reset();
}

bool Relay::now_ready_to_close() const {
  auto now = Clock::now();
  if (now >= shutdown_forced_at_) return true;
  return now >= *shutdown_at_ && session_.copies_outstanding() == 0;
}

std::size_t Relay::queued_towards(Side side) {
  return session_.output(side).size() + end(side).writing;
}

void Relay::wake_writers() {
  client_.wake_writer.cancel();
  broker_.wake_writer.cancel();
}

bool Relay::may_send_directly(Side side) {
  Endpoint& e = end(side);
  DirectWrite d;
  d.tls = !e.direct_writes;
  d.closed = e.closed;
  d.writing = e.writing;
  d.sent_ahead = e.sent_ahead;
  Clock::time_point now{};
  if (d.tls) {
    d.source_holds_input = end(other(side)).stream.holds_input();
    now = Clock::now();
    d.since_last_write = now - e.last_write;
  }
  if (!net::may_send_directly(d)) return false;
  if (d.tls) e.last_write = now;
  return true;
}

void Relay::flush(Side side) {
  Endpoint& e = end(side);
  // Frames forwarded unchanged go out from the input buffer they were read into, uncopied.
  amqp::ByteView run = session_.forwarded(side);
  // output() would copy the run: it is asked only when there is none. With nothing to send,
  // may_send_directly (a clock read over TLS) is not asked at all.
  const bool direct = (!run.empty() || !session_.output(side).empty()) && may_send_directly(side);
  if (!run.empty() && direct) {
    boost::system::error_code ec;
    std::size_t n = e.stream.try_send(run.data(), run.size(), ec);
    if (ec) n = 0;  // the writer meets the same error and handles it
    session_.forwarded_written(side, n);
    if (n == run.size()) e.wake_reader.cancel();
  }
  amqp::Bytes& pending = session_.output(side);  // what is left of the run, copied
  if (!pending.empty() && direct && run.empty()) {
    boost::system::error_code ec;
    std::size_t n = e.stream.try_send(pending.data(), pending.size(), ec);
    // On an error the bytes stay queued: the writer meets the same error and handles it.
    if (!ec && n == pending.size()) {
      pending.clear();
      e.wake_reader.cancel();  // a reader held back by this side's queue may go on
    } else if (!ec) {
      e.sent_ahead = n;  // the writer sends the rest, without moving it to the front first
    }
  }
  if (!pending.empty() || session_.close_after_flush(side)) e.wake_writer.cancel();
}

bool Relay::may_send_ahead(Side side) {
  const Endpoint& e = end(side);
  return e.direct_writes && !e.closed && e.writing == 0 && e.sent_ahead == 0;
}

void Relay::flush_both() {
  flush(Side::client);
  flush(Side::broker);
}

void Relay::close_socket(Side side) {
  Endpoint& e = end(side);
  if (e.closed) return;
  e.closed = true;
  e.stream.close();
  e.wake_reader.cancel();
  e.wake_writer.cancel();
  end(other(side)).wake_reader.cancel();
}

asio::awaitable<void> Relay::reader(Side side) {
  Endpoint& self = end(side);
  Endpoint& peer = end(other(side));
  while (!self.closed) {
    // Back-pressure: while the other side has not taken what we already gave it, stop reading.
    while (!session_.input_closed(side) && !peer.closed &&
           queued_towards(other(side)) > options_.buffer_bytes) {
      peer.wake_reader.expires_at(Clock::time_point::max());
      co_await peer.wake_reader.async_wait(kUseTuple);
    }
    std::span<std::uint8_t> space = session_.input_space(side, kReadChunk);
    auto [ec, n] = co_await self.stream.read_some(space.data(), space.size());
    if (ec) {
      if (!session_.input_closed(side)) {
        spdlog::debug("conn {}: {} side closed: {}", id_, session::to_string(side), ec.message());
        session_.on_eof(side);
      }
      wake_writers();
      co_return;
    }
    self.last_read = Clock::now();
    if (may_send_ahead(other(side))) {
      amqp::ByteView ahead = session_.receive_input(side, n);
      boost::system::error_code ec;
      std::size_t sent = ahead.empty() ? 0 : peer.stream.try_send(ahead.data(), ahead.size(), ec);
      if (!ec) session_.written_ahead(other(side), sent);
      session_.handle_input(side);
    } else {
      session_.commit_input(side, n);
    }
    // Send first: what only counts (the last delivery's record, the traffic metrics) waits.
    flush(other(side));
    flush(side);
    session_.finish_bookkeeping();
    report_traffic(side);
  }
}

asio::awaitable<void> Relay::writer(Side side) {
  Endpoint& self = end(side);
  amqp::Bytes writing;
  int waits = 0;
  while (!self.closed) {
    amqp::Bytes& pending = session_.output(side);
    // Over TLS a read yields one record: a client's publish (method, header, body) comes as
    // three. While the other side's reader already holds the next records, let it take them,
    // so that they leave in one write (one record, one send) rather than one each.
    if (!pending.empty() && waits < kRecordWaits && end(other(side)).stream.holds_input()) {
      ++waits;
      co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
      continue;
    }
    waits = 0;
    if (!pending.empty()) {
      writing.swap(pending);
      std::size_t sent = std::exchange(self.sent_ahead, 0);
      self.writing = writing.size() - sent;
      auto [ec, n] = co_await self.stream.write(writing.data() + sent, writing.size() - sent);
      self.writing = 0;
      if (!self.direct_writes) self.last_write = Clock::now();
      writing.clear();
      self.wake_reader.cancel();
      if (ec) {
        spdlog::debug("conn {}: writing to the {} side failed: {}", id_, session::to_string(side),
                      ec.message());
        session_.on_eof(side);
        wake_writers();
        close_socket(side);
      }
      continue;
    }
    if (session_.close_after_flush(side)) {
      co_await self.stream.shutdown_send(kLinger);
      self.wake_writer.expires_after(kLinger);
      co_await self.wake_writer.async_wait(kUseTuple);
      close_socket(side);
      co_return;
    }
    self.wake_writer.expires_at(Clock::time_point::max());
    co_await self.wake_writer.async_wait(kUseTuple);
  }
}

asio::awaitable<void> Relay::watchdog() {
  asio::steady_timer tick(co_await asio::this_coro::executor);
  while (!client_.closed || !broker_.closed) {
    tick.expires_after(kWatchdogTick);
    co_await tick.async_wait(kUseTuple);
    if (session_.finished()) continue;
    session_.on_tick(
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch())
            .count());
    if (shutdown_at_ && !close_sent_at_ && now_ready_to_close()) {
      session_.close_gracefully(amqp::reply::connection_forced,
                                "CONNECTION_FORCED - nackguard is shutting down");
      close_sent_at_ = Clock::now();
    } else if (close_sent_at_ && Clock::now() - *close_sent_at_ > kCloseOkWait) {
      // A client that never answers the close (stuck in a callback, heartbeats off) does not
      // hold the shutdown: its broker connection is closed and requeues what it held.
      spdlog::info("conn {}: no close-ok from the client within {} s; closing", id_,
                   kCloseOkWait.count());
      session_.on_eof(Side::client);
    }
    flush_both();
    auto now = Clock::now();
    if (!session_.is_open() && now - started_ > options_.handshake_timeout) {
      spdlog::info("conn {}: closed: the AMQP handshake did not complete within {} ms", id_,
                   options_.handshake_timeout.count());
      session_.on_eof(Side::client);
      wake_writers();
      continue;
    }
    std::uint16_t heartbeat = session_.heartbeat_seconds();
    if (heartbeat == 0 || !session_.is_open()) continue;
    // The spec's rule: a peer silent for two heartbeat intervals is dead.
    auto silence_limit = std::chrono::seconds(2 * heartbeat);
    for (Side side : {Side::client, Side::broker}) {
      if (now - end(side).last_read > silence_limit) {
        spdlog::info("conn {}: the {} side sent nothing for {} s (heartbeat {} s); closing", id_,
                     session::to_string(side), 2 * heartbeat, heartbeat);
        session_.on_eof(side);
        wake_writers();
        break;
      }
    }
  }
}

}  // namespace nackguard::net
