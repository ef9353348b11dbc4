#pragma once
// A small blocking AMQP 0-9-1 client: one connection, one channel, publisher confirms and
// basic.get. The protocol work is in protocol.hpp; this class moves its bytes over a Transport,
// waits for replies with deadlines, and keeps heartbeats going while it waits.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "proxy/amqp/frame.hpp"
#include "proxy/amqp/properties.hpp"
#include "proxy/replay/protocol.hpp"
#include "proxy/replay/transport.hpp"
#include "proxy/replay/url.hpp"

namespace nackguard::replay {

struct ClientSettings {
  Upstream upstream;
  std::chrono::milliseconds connect_timeout{5000};
  std::chrono::milliseconds reply_timeout{30000};  // for every reply and publisher confirm
  std::uint16_t max_heartbeat = kWantedHeartbeat;
  std::string version;
};

// A message taken with basic.get, not acked yet.
struct Delivery {
  std::uint64_t delivery_tag = 0;
  bool redelivered = false;
  std::uint32_t message_count = 0;  // messages left in the queue after this one
  amqp::ContentHeader header;
  amqp::Bytes body;
};

// How the broker settled a publish with mandatory=true on a confirm channel.
struct PublishOutcome {
  enum class Kind { confirmed, nacked, returned };
  Kind kind = Kind::confirmed;
  std::string detail;  // for returned: "312 NO_ROUTE"
};

struct Confirmation {
  std::uint64_t seq = 0;  // the publish's sequence number on the confirm channel
  PublishOutcome outcome;
};

class Client {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Client(ClientSettings settings);
  ~Client();

  // Connects, logs in, opens the vhost and channel 1. Throws Failure (or BrokerClosed) with a
  // line for a person: refused connection, refused login, unknown vhost.
  void open();
  // queue.declare passive=true: the queue's ready message count. A missing queue throws
  // BrokerClosed with code 404 (the broker has closed the channel).
  std::uint32_t declare_passive(const std::string& queue);
  void confirm_select();
  // basic.get no_ack=false; nullopt when the queue is empty.
  std::optional<Delivery> get(const std::string& queue);
  // basic.publish mandatory=true, without waiting: returns the publish's sequence number,
  // which a later Confirmation names.
  std::uint64_t publish(const std::string& exchange, const std::string& routing_key,
                        const amqp::ContentHeader& header, amqp::ByteView body);
  // The publishes the broker has settled since the last call (a basic.return is matched to
  // its publish by content and reported with the confirm that follows it). With `wait`,
  // blocks until at least one is settled if any is outstanding; throws Failure when none is
  // within reply_timeout.
  std::vector<Confirmation> confirms(bool wait);
  std::size_t unconfirmed() const { return outstanding_.size(); }
  // basic.ack, and basic.nack(requeue=true) of each tag: queued, and sent with the next write
  // or before the next wait for the broker.
  void ack(std::uint64_t delivery_tag);
  void requeue(std::span<const std::uint64_t> delivery_tags);
  // Waits until `until`, answering heartbeats; returns early when `stop` says so.
  void idle_until(Clock::time_point until, const std::function<bool()>& stop);
  // connection.close and a short wait for close-ok; never throws. The broker requeues
  // whatever is still unacked.
  void close() noexcept;

  const Tuning& tuning() const { return tuning_; }
  std::string endpoint() const { return settings_.upstream.endpoint(); }

 private:
  // The next unit from the broker on channel 0 or 1, after heartbeats and connection.blocked;
  // nullopt when `deadline` passes. Throws on a closed channel or connection.
  std::optional<Inbound> next(Clock::time_point deadline);
  Inbound next_or_throw(Clock::time_point deadline, const char* waiting_for);
  // Waits for the method `key` on channel 1 and decodes it into `out`.
  template <typename M>
  void expect(M& out, const char* waiting_for);
  // Appends to the queued frames and writes them all.
  void send(const amqp::Bytes& bytes);
  void flush();
  // Takes basic.ack, basic.nack and basic.return for outstanding publishes; false for others.
  bool on_publisher_event(const Inbound& unit);
  void settle(std::uint64_t tag, bool multiple, bool acked);
  void keep_alive(Clock::time_point now);
  [[noreturn]] void on_close(const Inbound& unit);
  // In milliseconds, so that half of it is not rounded down to nothing.
  std::chrono::milliseconds heartbeat_interval() const {
    return std::chrono::milliseconds(1000 * tuning_.heartbeat);
  }
  Clock::time_point reply_deadline() const { return Clock::now() + settings_.reply_timeout; }

  ClientSettings settings_;
  Transport transport_;
  amqp::FrameDecoder decoder_{kWantedFrameMax};
  InboundAssembler assembler_;
  amqp::Bytes input_;
  Tuning tuning_;
  bool open_ = false;
  bool blocked_ = false;  // connection.blocked: the broker has stopped reading our publishes
  std::uint64_t publish_seq_ = 0;
  struct Outstanding {
    std::uint64_t fingerprint = 0;
    std::optional<std::string> returned;
  };
  std::map<std::uint64_t, Outstanding> outstanding_;  // by sequence number
  std::vector<Confirmation> settled_;
  amqp::Bytes queued_;  // frames not written yet
  Clock::time_point last_sent_{};
  Clock::time_point last_received_{};
};

}  // namespace nackguard::replay
