#include "proxy/net/server.hpp"

#include "proxy/net/upstream_connect.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace nackguard::net {

namespace asio = boost::asio;
using asio::ip::tcp;

Server::Server(asio::io_context& io, const std::string& address, std::uint16_t port,
               RelayOptions options)
    : io_(io), acceptor_(asio::make_strand(io)), options_(std::move(options)) {
  if (!options_.upstreams) throw std::invalid_argument("Server: RelayOptions::upstreams is unset");
  std::string where = address + ":" + std::to_string(port);
  boost::system::error_code ec;
  auto ip = asio::ip::make_address(address, ec);
  if (ec) throw std::runtime_error("listen.address \"" + address + "\" is not an IP address");
  tcp::endpoint endpoint(ip, port);
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    throw std::runtime_error("cannot listen on " + where + ": " + ec.message() +
                             "; choose a free listen.port or stop what holds it");
  }
}

void Server::start() {
  spawn_accept_loop();
  for (std::size_t i = 0; i < options_.upstreams->addresses().size(); ++i) {
    asio::co_spawn(acceptor_.get_executor(), probe_upstream(i), asio::detached);
  }
  asio::co_spawn(acceptor_.get_executor(), trim_heap(), asio::detached);
}

asio::awaitable<void> Server::trim_heap() {
  // glibc keeps the heap that closed connections freed (each held read buffers and session
  // state), and later connections touch it at new offsets, so RSS after a burst of 1,000
  // connections stayed 40 MB above the baseline and climbed with each burst. malloc_trim(0)
  // hands the free pages back. It runs here, on the acceptor's strand, never on a relay's,
  // at most once a second, and only once many connections closed: as many as are still
  // running (at least 64), or all of them.
  auto executor = co_await asio::this_coro::executor;
  asio::steady_timer tick(executor);
  auto last_trim = std::chrono::steady_clock::now();
  while (acceptor_.is_open()) {
    tick.expires_after(std::chrono::milliseconds(250));
    co_await tick.async_wait(asio::as_tuple(asio::use_awaitable));
    std::size_t closed = counts_->closed_since_trim.load(std::memory_order_relaxed);
    std::size_t running = counts_->running.load(std::memory_order_relaxed);
    bool many = closed >= std::max<std::size_t>(64, running) || (closed > 0 && running == 0);
    auto now = std::chrono::steady_clock::now();
    if (!many || now - last_trim < std::chrono::seconds(1)) continue;
    counts_->closed_since_trim.fetch_sub(closed, std::memory_order_relaxed);
    last_trim = now;
    {
      // A weak_ptr keeps its relay's whole make_shared block (session, guard) allocated.
      std::lock_guard lock(relays_mutex_);
      std::erase_if(relays_, [](const std::weak_ptr<Relay>& weak) { return weak.expired(); });
    }
#if defined(__GLIBC__)
    malloc_trim(0);
#endif
  }
}

std::optional<std::string> Server::upstream_unreachable() const {
  return options_.upstreams->unreachable();
}

asio::awaitable<void> Server::probe_upstream(std::size_t index) {
  // A bare TCP connect, closed at once: enough to know the broker's port answers, and cheap
  // for the broker. Each address has its own probe, so that one black-holed node does not
  // delay the others' results.
  auto executor = co_await asio::this_coro::executor;
  asio::steady_timer pause(executor);
  Upstreams& upstreams = *options_.upstreams;
  const UpstreamAddress address = upstreams.addresses()[index];
  while (acceptor_.is_open()) {
    upstreams.probed(index, co_await probe_address(address, options_.connect_timeout));
    pause.expires_after(std::chrono::seconds(5));
    co_await pause.async_wait(asio::as_tuple(asio::use_awaitable));
  }
}

void Server::stop() {
  asio::post(acceptor_.get_executor(), [this] {
    boost::system::error_code ignored;
    acceptor_.close(ignored);
  });
}

void Server::shutdown(std::chrono::milliseconds grace) {
  stop();
  std::lock_guard lock(relays_mutex_);
  shutting_down_ = true;  // a connection accepted from now on is refused (take_connection)
  for (const auto& weak : relays_) {
    if (auto relay = weak.lock()) relay->begin_shutdown(grace);
  }
}

std::size_t Server::live_connections() {
  std::lock_guard lock(relays_mutex_);
  std::erase_if(relays_, [](const std::weak_ptr<Relay>& weak) {
    auto relay = weak.lock();
    return !relay || relay->finished();
  });
  return relays_.size();
}

void Server::spawn_accept_loop() {
  // An exception out of the loop (bad_alloc, say) is logged, and accepting starts again
  // rather than end silently while the process goes on.
  asio::co_spawn(acceptor_.get_executor(), accept_loop(), [this](std::exception_ptr error) {
    if (!error) return;
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      spdlog::error("accepting connections failed by an internal error: {}; accepting again",
                    e.what());
    }
    if (acceptor_.is_open()) spawn_accept_loop();
  });
}

asio::awaitable<void> Server::pause_after_failed_accept(const boost::system::error_code& ec) {
  accept_failures_.fetch_add(1, std::memory_order_relaxed);
  ++accept_failures_unlogged_;
  auto now = std::chrono::steady_clock::now();
  if (now - last_accept_failure_log_ >= std::chrono::seconds(1)) {
    bool out_of_descriptors = ec == asio::error::no_descriptors ||
                              ec == boost::system::errc::too_many_files_open_in_system;
    spdlog::warn("accept failed {} time(s) in the last second: {}{}; accepting pauses {} ms",
                 accept_failures_unlogged_, ec.message(),
                 out_of_descriptors ? " (raise the open-files limit: ulimit -n, or LimitNOFILE= "
                                      "in the systemd unit)"
                                    : "",
                 kAcceptPause.count());
    last_accept_failure_log_ = now;
    accept_failures_unlogged_ = 0;
  }
  asio::steady_timer pause(acceptor_.get_executor(), kAcceptPause);
  co_await pause.async_wait(asio::as_tuple(asio::use_awaitable));
}

asio::any_io_executor Server::connection_executor() {
  if (options_.one_thread) return io_.get_executor();
  return asio::make_strand(io_);
}

asio::awaitable<void> Server::accept_loop() {
  while (acceptor_.is_open()) {
    auto [ec, socket] =
        co_await acceptor_.async_accept(connection_executor(), asio::as_tuple(asio::use_awaitable));
    if (ec == asio::error::operation_aborted) co_return;
    if (ec) {
      // Out of file descriptors (EMFILE, ENFILE), for example: the pending connection stays
      // in the backlog until descriptors are free; meanwhile keep serving the others.
      co_await pause_after_failed_accept(ec);
      continue;
    }
    if (accept_hook_) accept_hook_();
    take_connection(std::move(socket));
  }
}

void Server::take_connection(tcp::socket socket) {
  std::uint64_t id = next_id_++;
  std::shared_ptr<Relay> relay;
  {
    std::lock_guard lock(relays_mutex_);
    if (shutting_down_) {
      boost::system::error_code ignored;
      socket.close(ignored);  // accepted after shutdown() began: no new connections
      return;
    }
    relay = std::make_shared<Relay>(std::move(socket), options_, id);
    // Drop finished ones now and then, so the list stays as long as the live connections.
    if (relays_.size() >= 64 && relays_.size() % 64 == 0) {
      std::erase_if(relays_, [](const std::weak_ptr<Relay>& weak) { return weak.expired(); });
    }
    relays_.push_back(relay);
  }
  auto executor = relay->executor();
  metrics::Registry* metrics = options_.metrics;
  if (metrics) metrics->client_connected();
  counts_->running.fetch_add(1, std::memory_order_relaxed);
  asio::co_spawn(executor, relay->run(), [counts = counts_, id, metrics](std::exception_ptr error) {
    counts->running.fetch_sub(1, std::memory_order_relaxed);
    counts->closed_since_trim.fetch_add(1, std::memory_order_relaxed);
    if (metrics) metrics->client_disconnected();
    if (!error) return;
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      spdlog::error("conn {}: ended by an internal error: {}", id, e.what());
    }
  });
}

}  // namespace nackguard::net
