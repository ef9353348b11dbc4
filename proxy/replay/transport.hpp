#pragma once
// A blocking TCP connection with a deadline on every operation, for `nackguard replay`.
// Boost.Asio stays behind this interface (and out of the other replay headers).

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "proxy/amqp/bytes.hpp"

namespace nackguard::replay {

class Transport {
 public:
  using Clock = std::chrono::steady_clock;

  Transport();
  ~Transport();
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  // Resolves and connects, with TCP_NODELAY. Throws Failure naming host:port and the cause.
  void connect(const std::string& host, std::uint16_t port, Clock::duration timeout);
  // Writes all of `bytes`; throws Failure on an error or when the deadline passes.
  void write(amqp::ByteView bytes, Clock::time_point deadline);
  // Appends what arrives to `into`, waiting until something does or the deadline passes
  // (then returns false). Throws Failure when the peer closes or on an error.
  bool read_some(amqp::Bytes& into, Clock::time_point deadline);
  // Closes the socket; safe to call twice.
  void close() noexcept;

  const std::string& endpoint() const { return endpoint_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string endpoint_;
};

}  // namespace nackguard::replay
