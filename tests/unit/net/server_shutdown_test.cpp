// Server::shutdown against a connection accepted at the worst moment: after the acceptor was
// told to close and the relays were walked, but before the new relay was registered. Such a
// connection never got begin_shutdown, and the drain waited for it for ever.

#include <gtest/gtest.h>

#include <array>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <chrono>
#include <thread>
#include <vector>

#include "proxy/net/server.hpp"

namespace nackguard::net {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;

TEST(ServerShutdown, ConnectionAcceptedDuringTheShutdownWalkDoesNotHangTheDrain) {
  asio::io_context io(2);
  // The "broker": accepts the upstream connection and says nothing.
  tcp::acceptor broker(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  std::vector<tcp::socket> upstream;
  std::function<void()> accept_upstream = [&] {
    broker.async_accept([&](boost::system::error_code ec, tcp::socket s) {
      if (ec) return;
      upstream.push_back(std::move(s));
      accept_upstream();
    });
  };
  accept_upstream();

  RelayOptions options;
  options.upstreams = std::make_shared<Upstreams>(
      std::vector<config::Endpoint>{{"127.0.0.1", broker.local_endpoint().port()}});
  // Far beyond the test's wait: only the shutdown may end the connection.
  options.handshake_timeout = std::chrono::minutes(5);
  Server server(io, "127.0.0.1", 0, options);
  std::atomic<bool> hooked{false};
  // The shutdown lands between the accept and the registration of its relay.
  server.set_accept_hook([&] {
    if (!hooked.exchange(true)) server.shutdown(std::chrono::milliseconds(50));
  });
  server.start();
  auto work = asio::make_work_guard(io);
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) threads.emplace_back([&] { io.run(); });

  asio::io_context client_io;
  tcp::socket client(client_io);
  client.connect(server.local_endpoint());

  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while ((!hooked || server.live_connections() != 0) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(hooked);
  EXPECT_EQ(server.live_connections(), 0u);
  // The client sees its connection closed, not left open (read only then: a sync read
  // would wait for the handshake timeout).
  if (server.live_connections() == 0) {
    std::array<char, 8> buffer{};
    boost::system::error_code ec;
    asio::read(client, asio::buffer(buffer), ec);
    EXPECT_EQ(ec, asio::error::eof);
  }
  client.close();

  work.reset();
  io.stop();
  for (auto& t : threads) t.join();
}

}  // namespace
}  // namespace nackguard::net
