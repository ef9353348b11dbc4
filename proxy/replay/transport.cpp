#include "proxy/replay/transport.hpp"

#include <array>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <optional>

#include "proxy/replay/errors.hpp"

namespace nackguard::replay {

namespace asio = boost::asio;
using boost::system::error_code;
using tcp = asio::ip::tcp;

struct Transport::Impl {
  asio::io_context io;
  tcp::socket socket{io};

  // Starts one asynchronous operation and runs the io_context until it completes or the
  // deadline passes; on the deadline the operation is cancelled and nullopt returned.
  template <typename Start>
  std::optional<error_code> run(Start&& start, Clock::time_point deadline) {
    std::optional<error_code> result;
    io.restart();
    start(result);
    io.run_until(deadline);
    if (!result) {
      error_code ignored;
      socket.cancel(ignored);
      io.restart();
      io.run();  // lets the cancelled operation's handler run
      if (result == asio::error::operation_aborted) result.reset();
    }
    return result;
  }
};

Transport::Transport() : impl_(std::make_unique<Impl>()) {}
Transport::~Transport() {
  close();
}

void Transport::connect(const std::string& host, std::uint16_t port, Clock::duration timeout) {
  endpoint_ =
      (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
  tcp::resolver resolver(impl_->io);
  error_code ec;
  auto endpoints = resolver.resolve(host, std::to_string(port), ec);
  if (ec) throw Failure("cannot resolve the broker's host '" + host + "': " + ec.message());

  const auto deadline = Clock::now() + timeout;
  auto result = impl_->run(
      [&](std::optional<error_code>& out) {
        asio::async_connect(impl_->socket, endpoints,
                            [&out](const error_code& e, const tcp::endpoint&) { out = e; });
      },
      deadline);
  if (!result) {
    close();
    throw Failure(
        "cannot connect to " + endpoint_ + ": no answer within " +
        std::to_string(std::chrono::duration_cast<std::chrono::seconds>(timeout).count()) +
        " s; is the broker up and the address right?");
  }
  if (*result) {
    close();
    throw Failure("cannot connect to " + endpoint_ + ": " + result->message() +
                  "; is the broker up and the address right?");
  }
  impl_->socket.set_option(tcp::no_delay(true), ec);
}

void Transport::write(amqp::ByteView bytes, Clock::time_point deadline) {
  if (bytes.empty()) return;
  auto result = impl_->run(
      [&](std::optional<error_code>& out) {
        asio::async_write(impl_->socket, asio::buffer(bytes.data(), bytes.size()),
                          [&out](const error_code& e, std::size_t) { out = e; });
      },
      deadline);
  if (!result) throw Failure("writing to " + endpoint_ + " timed out; the broker is not reading");
  if (*result) throw Failure("lost the connection to " + endpoint_ + ": " + result->message());
}

bool Transport::read_some(amqp::Bytes& into, Clock::time_point deadline) {
  std::array<std::uint8_t, 65536> buffer;
  std::size_t received = 0;
  auto result = impl_->run(
      [&](std::optional<error_code>& out) {
        impl_->socket.async_read_some(asio::buffer(buffer),
                                      [&out, &received](const error_code& e, std::size_t n) {
                                        received = n;
                                        out = e;
                                      });
      },
      deadline);
  if (!result) return false;
  if (*result == asio::error::eof) {
    throw Failure(endpoint_ + " closed the connection");
  }
  if (*result) throw Failure("lost the connection to " + endpoint_ + ": " + result->message());
  into.insert(into.end(), buffer.begin(), buffer.begin() + static_cast<std::ptrdiff_t>(received));
  return true;
}

void Transport::close() noexcept {
  if (!impl_) return;
  error_code ignored;
  impl_->socket.shutdown(tcp::socket::shutdown_both, ignored);
  impl_->socket.close(ignored);
}

}  // namespace nackguard::replay
