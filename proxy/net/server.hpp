#pragma once
// Accepts client connections and starts one Relay per connection, each on its own strand.

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
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

 private:
  boost::asio::awaitable<void> accept_loop();
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
  bool stopped_ = false;
};

}  // namespace nackguard::net
