#pragma once
// Accepts client connections and starts one Relay per connection, each on its own strand.

#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "proxy/net/relay.hpp"

namespace nackguard::net {

class Server {
 public:
  // Binds and listens; throws std::runtime_error naming the address if that fails.
  Server(boost::asio::io_context& io, const std::string& address, std::uint16_t port,
         RelayOptions options);

  void start();
  // Stops accepting new connections.
  void stop();
  // Stops accepting and asks every connection to close after `grace` (see Relay).
  void shutdown(std::chrono::milliseconds grace);
  // Connections still running.
  std::size_t live_connections();
  // Why the broker looks unreachable (a TCP connect to each upstream address, tried every 5 s,
  // failed for every one of them), or nullopt while at least one address answers.
  std::optional<std::string> upstream_unreachable() const;
  boost::asio::ip::tcp::endpoint local_endpoint() const { return acceptor_.local_endpoint(); }
  // Accepts that failed (EMFILE, ENFILE or another error); each one pauses accepting.
  std::uint64_t accept_failures() const { return accept_failures_.load(); }
  // Tests: runs on the acceptor's strand after each accept, before the connection is taken.
  void set_accept_hook(std::function<void()> hook) { accept_hook_ = std::move(hook); }

  // How long accepting pauses after a failed accept: out of descriptors, the listening socket
  // stays readable, and accepting again at once would spin.
  static constexpr std::chrono::milliseconds kAcceptPause{100};

 private:
  void spawn_accept_loop();
  boost::asio::awaitable<void> accept_loop();
  // Where a connection's handlers run: a strand of its own, or the io_context itself when it
  // runs on one thread (RelayOptions::one_thread).
  boost::asio::any_io_executor connection_executor();
  boost::asio::awaitable<void> pause_after_failed_accept(const boost::system::error_code& ec);
  // Takes an accepted connection unless shutdown began: checked and registered under the same
  // lock as shutdown()'s walk, so that every relay either gets begin_shutdown or never runs.
  void take_connection(boost::asio::ip::tcp::socket socket);
  boost::asio::awaitable<void> probe_upstream(std::size_t index);
  // Gives freed heap back to the system after many connections closed (see server.cpp).
  boost::asio::awaitable<void> trim_heap();

  boost::asio::io_context& io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  RelayOptions options_;
  std::atomic<std::uint64_t> next_id_{1};
  std::mutex relays_mutex_;
  std::vector<std::weak_ptr<Relay>> relays_;
  struct Counts {
    std::atomic<std::size_t> running{0};            // relays whose run() has not ended
    std::atomic<std::size_t> closed_since_trim{0};  // relays ended since the last heap trim
  };
  // Shared with each relay's completion handler, which may run after the server is gone.
  std::shared_ptr<Counts> counts_ = std::make_shared<Counts>();
  bool shutting_down_ = false;  // guarded by relays_mutex_
  std::atomic<std::uint64_t> accept_failures_{0};
  std::chrono::steady_clock::time_point last_accept_failure_log_{};  // the acceptor's strand
  std::uint64_t accept_failures_unlogged_ = 0;                       // the acceptor's strand
  std::function<void()> accept_hook_;
};

}  // namespace nackguard::net
