// The relay writers' completion condition (transfer_everything_left): each write_some is
// offered everything left, not Asio's 64 KiB, and Stream::write with it still delivers every
// byte in order to a peer that reads slowly.

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <numeric>
#include <vector>

#include "proxy/net/stream.hpp"

namespace nackguard::net {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;

TEST(TransferEverythingLeft, OffersMoreThanAsiosChunkAndNothingAfterAnError) {
  boost::system::error_code ok;
  EXPECT_GE(transfer_everything_left(ok, 0), std::size_t{64} << 20);
  EXPECT_GE(transfer_everything_left(ok, 123456), std::size_t{64} << 20);
  EXPECT_EQ(transfer_everything_left(asio::error::broken_pipe, 10), 0u);
}

TEST(TransferEverythingLeft, AsyncWriteDeliversEveryByteToASlowReader) {
  asio::io_context io;
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
  tcp::socket sender(io);
  sender.connect(acceptor.local_endpoint());
  tcp::socket receiver = acceptor.accept();
  Stream stream(std::move(sender));

  std::vector<unsigned char> sent(4 << 20);
  std::iota(sent.begin(), sent.end(), 0);
  std::vector<unsigned char> got(sent.size());
  boost::system::error_code write_ec = asio::error::would_block;
  std::size_t written = 0;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto [ec, n] = co_await stream.write(sent.data(), sent.size());
        write_ec = ec;
        written = n;
      },
      asio::detached);
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        // Reads only after the sender's socket buffer has filled.
        asio::steady_timer wait(io, std::chrono::milliseconds(50));
        co_await wait.async_wait(asio::use_awaitable);
        co_await asio::async_read(receiver, asio::buffer(got), asio::use_awaitable);
      },
      asio::detached);
  io.run();
  EXPECT_FALSE(write_ec);
  EXPECT_EQ(written, sent.size());
  EXPECT_TRUE(got == sent);
}

}  // namespace
}  // namespace nackguard::net
