#pragma once
// The replay's AMQP 0-9-1 client: one connection, one channel, publisher confirms and
// basic.get, on rabbitmq-c (Debian's librabbitmq). rabbitmq-c does the socket, TLS, the
// handshake and SASL (PLAIN or EXTERNAL), heartbeats, framing and the method codecs; this class
// puts deadlines on every wait, matches confirms and returns to publishes, and hands messages
// over with their properties decoded by the project's codec (rabbitmq_properties.hpp).

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "proxy/amqp/properties.hpp"
#include "proxy/replay/url.hpp"
#include "proxy/replay/write_watchdog.hpp"

struct amqp_connection_state_t_;

namespace nackguard::replay {

inline constexpr std::uint32_t kWantedFrameMax = 131072;
inline constexpr std::uint16_t kWantedHeartbeat = 60;
// RabbitMQ refuses messages above 512 MiB (max_message_size's ceiling); a larger body_size
// announced by a peer is refused before anything is allocated for it.
inline constexpr std::uint64_t kMaxBodyBytes = 512ull << 20;

struct ClientSettings {
  Upstream upstream;
  TlsSettings tls;
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

// "404 NOT_FOUND - no queue 'q' in vhost '/'": a reply code and the broker's own text.
std::string describe_reply(std::uint16_t code, const std::string& text);

class Client {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Client(ClientSettings settings);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Connects (TLS for amqps://), logs in (PLAIN, or EXTERNAL with auth_mechanism=external),
  // opens the vhost and channel 1. Throws Failure (or BrokerClosed) with a line for a person:
  // refused connection, failed TLS handshake, refused login, unknown vhost.
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
  // basic.ack, and basic.nack(requeue=true) of each tag.
  void ack(std::uint64_t delivery_tag);
  void requeue(std::span<const std::uint64_t> delivery_tags);
  // Waits until `until`, answering heartbeats; returns early when `stop` says so.
  void idle_until(Clock::time_point until, const std::function<bool()>& stop);
  // connection.close and a short wait for close-ok; never throws. The broker requeues
  // whatever is still unacked.
  void close() noexcept;

  std::string endpoint() const { return settings_.upstream.endpoint(); }

 private:
  // One thing the broker sent on channel 0 or 1, with the fields the replay reads copied out
  // of rabbitmq-c's decoded method (whose memory is reused).
  struct Inbound {
    std::uint32_t method = 0;                   // rabbitmq-c's method number: class << 16 | method
    std::uint64_t tag = 0;                      // delivery_tag
    bool flag = false;                          // redelivered, or multiple
    std::uint32_t count = 0;                    // message_count
    std::uint16_t code = 0;                     // reply_code
    std::string text;                           // reply_text
    std::optional<amqp::ContentHeader> header;  // with basic.get-ok and basic.return
    amqp::Bytes body;
  };

  // The next method from the broker (with its content), after heartbeats and
  // connection.blocked; nullopt when `deadline` passes. Throws on a closed channel or
  // connection.
  std::optional<Inbound> next(Clock::time_point deadline);
  Inbound next_or_throw(Clock::time_point deadline, const char* waiting_for);
  // Methods on channel 0: connection.blocked and unblocked are noted (true: read on); a
  // connection.close or channel.close throws.
  bool take_connection_method(Inbound& unit, const void* decoded);
  // The fields the replay reads from a method on its channel; get-ok and return bring their
  // content.
  void take_fields(Inbound& unit, const void* decoded, Clock::time_point deadline);
  Inbound expect(std::uint32_t method, const char* waiting_for);
  void read_content(Inbound& unit, Clock::time_point deadline);
  // One frame; false when the deadline passes.
  bool wait_frame(void* frame, Clock::time_point deadline);
  void send_method(std::uint16_t channel, std::uint32_t method, void* decoded);
  // Arms the write deadline around a rabbitmq-c call that writes.
  WriteWatchdog::Armed arm_write();
  // Throws for a write's failed status: the deadline's message when the watchdog fired.
  void check_write(int status, const std::string& doing);
  [[noreturn]] void fail(int status, const std::string& doing);
  // Takes basic.ack, basic.nack and basic.return for outstanding publishes; false for others.
  bool on_publisher_event(const Inbound& unit);
  void settle(std::uint64_t tag, bool multiple, bool acked);
  [[noreturn]] void on_close(const Inbound& unit);
  Clock::time_point reply_deadline() const { return Clock::now() + settings_.reply_timeout; }

  ClientSettings settings_;
  amqp_connection_state_t_* connection_ = nullptr;
  WriteWatchdog watchdog_;
  bool open_ = false;
  bool blocked_ = false;  // connection.blocked: the broker has stopped reading our publishes
  std::uint64_t publish_seq_ = 0;
  struct Outstanding {
    std::uint64_t fingerprint = 0;
    std::optional<std::string> returned;
  };
  std::map<std::uint64_t, Outstanding> outstanding_;  // by sequence number
  std::vector<Confirmation> settled_;
};

}  // namespace nackguard::replay
