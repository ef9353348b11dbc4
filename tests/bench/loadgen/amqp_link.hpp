#pragma once
// One blocking AMQP connection with one channel, on rabbitmq-c. Errors throw LinkError with
// what the library or the broker said.

#include <amqp.h>

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include "loadgen/options.hpp"

namespace nackguard::bench {

class LinkError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A frame that was not a delivery: what a publisher or consumer may meet on its channel.
struct ChannelEvent {
  enum class Kind { none, ack, nack, other };
  Kind kind = Kind::none;
  std::uint64_t delivery_tag = 0;
  bool multiple = false;
};

class AmqpLink {
 public:
  static constexpr amqp_channel_t kChannel = 1;

  // Connects to options.host:port, logs in and opens channel 1.
  AmqpLink(const Options& options, std::uint16_t port);
  explicit AmqpLink(const Options& options) : AmqpLink(options, options.port) {}
  ~AmqpLink();
  AmqpLink(const AmqpLink&) = delete;
  AmqpLink& operator=(const AmqpLink&) = delete;

  void declare_queue(const std::string& queue);
  void delete_queue(const std::string& queue);
  void qos(std::uint16_t prefetch);
  void confirm_select();
  void consume(const std::string& queue);

  void publish(const std::string& queue, const amqp_basic_properties_t& properties,
               amqp_bytes_t body);
  void ack(std::uint64_t tag, bool multiple);
  void nack(std::uint64_t tag, bool requeue);

  // Waits up to `timeout` for a frame on the channel. Throws on a channel or connection close.
  ChannelEvent wait_event(std::chrono::microseconds timeout);
  // Frames already read and not yet handled: wait_event(0) returns one without a syscall.
  bool has_buffered() const;
  // Waits up to `timeout` for the socket to become readable, to the microsecond. (A timeout
  // handed to rabbitmq-c is cut to whole milliseconds: below 1 ms its poll() returns at once,
  // and a caller that waits in a loop spins a CPU.)
  bool wait_readable(std::chrono::microseconds timeout) const;

  // A delivery, or false after `timeout`. The envelope must be destroyed by the caller.
  // Non-delivery frames in between are handed to wait_event's logic (acks are ignored).
  bool next_delivery(amqp_envelope_t& envelope, std::chrono::microseconds timeout);

  // Frees the connection's decode buffers; call between messages.
  void release_buffers();
  // Closes channel and connection politely; the destructor does it too, ignoring errors.
  void close();

 private:
  void check_rpc(std::string_view what);
  ChannelEvent to_event(const amqp_frame_t& frame);

  amqp_connection_state_t conn_ = nullptr;
  std::string where_;    // host:port, for messages
  bool quorum_ = false;  // declare_queue declares quorum queues (Options::quorum)
  bool open_ = false;
};

// What a library status code means, for messages.
std::string describe_status(int status);

}  // namespace nackguard::bench
