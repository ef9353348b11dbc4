#pragma once
// The proxy's own channel on a client's upstream connection (the channel number reserved at
// tune): it declares queues and publishes copies with publisher confirms, using the client's
// credentials and vhost. Sans-io and without callbacks: broker frames come in through on_frame,
// and what the calls produce (frames for the broker, each publish's one outcome, notices) is
// taken as a value with take_output().

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "proxy/amqp/frame.hpp"
#include "proxy/amqp/properties.hpp"
#include "proxy/retry/body_budget.hpp"
#include "proxy/retry/fallback.hpp"
#include "proxy/session/takeover.hpp"

namespace nackguard::session {

struct QueueSpec {
  std::string name;
  // Use the queue as it is if it exists, whatever its arguments; else declare it durable.
  // Without it, the queue is declared with `arguments`, and one that exists with other
  // arguments (the broker's PRECONDITION_FAILED) is used as it is all the same.
  bool use_existing = false;
  amqp::FieldTable arguments;  // for a declaration of our own (use_existing = false)
  // Declare again when the last declaration is older than this (it resets x-expires).
  std::int64_t redeclare_after_ms = -1;
};

struct PublishRequest {
  Ticket ticket;  // handed back in the publish's Outcome; ticket.job numbers the publish
  std::optional<QueueSpec> ensure;  // declared before the publish
  std::string exchange;
  std::string routing_key;
  amqp::ContentHeader header;
  // When not empty: the property flags and list as they are sent, instead of header.properties
  // encoded (a copy whose headers table the codec cannot encode; see raw_properties.hpp).
  amqp::Bytes raw_properties;
  std::shared_ptr<retry::RetainedBody> body;
  std::int64_t deadline_ms = 0;  // no confirm by then: failed
};

// A queue that exists with other arguments than asked for is used as it is: told once per
// channel and queue, with the broker's reply text.
struct QueueNotice {
  std::string queue;
  std::string why;
};

class ProxyChannel {
 public:
  // What the calls since the last take_output() produced, in order within each kind.
  struct Output {
    amqp::Bytes frames;  // whole frames for the broker, on the proxy's channel
    // One per publish. `failure` none: the broker confirmed the copy and routed it.
    // encode_failed: a frame of it could not be encoded (a name over 255 bytes, a content
    // header larger than frame_max), and nothing of it was sent. republish_failed: anything
    // else (refused, unroutable, no confirm in time, the channel or connection gone). `why`
    // says what failed.
    std::vector<Outcome> outcomes;
    std::vector<QueueNotice> notices;
    bool empty() const { return frames.empty() && outcomes.empty() && notices.empty(); }
  };

  // The reserved channel and the negotiated frame_max; without a channel every publish fails.
  void configure(std::optional<std::uint16_t> channel, std::uint32_t frame_max);
  void publish(PublishRequest request, std::int64_t now_ms);
  void on_frame(const amqp::Frame& frame, std::int64_t now_ms);
  void on_tick(std::int64_t now_ms);
  // The connection is gone: every publish not yet confirmed fails.
  void fail_all(const std::string& why);

  std::size_t outstanding() const { return waiting_.size() + in_flight_.size(); }
  Output take_output() { return std::exchange(output_, {}); }

 private:
  enum class State { closed, opening, selecting, ready };
  enum class QueueStatus { unknown, passive_sent, active_needed, active_sent, declared, failed };
  struct QueueInfo {
    QueueStatus status = QueueStatus::unknown;
    // It exists with other arguments: declared passively from then on (`failure` says why).
    bool as_is = false;
    bool as_is_told = false;
    std::int64_t declared_at_ms = 0;
    std::int64_t failed_until_ms = 0;
    std::string failure;
  };
  struct InFlight {
    Ticket ticket;
    std::string exchange;
    std::string routing_key;
    std::int64_t deadline_ms = 0;
    bool returned = false;
    std::string ensured_queue;  // the queue declared for it, if any
  };

  void pump(std::int64_t now_ms);
  // False if the head request must wait for a declaration, or, with `why` set, if the
  // declaration could not be encoded (then nothing was sent and the request fails).
  bool ensure_queue(const QueueSpec& spec, std::int64_t now_ms, std::string& why);
  void send_publish(PublishRequest& request);
  void on_method(const amqp::Frame& frame, std::uint32_t key, std::int64_t now_ms);
  // queue.declare-ok: the queue at the front of the declarations is declared.
  void on_declare_ok(std::int64_t now_ms);
  // basic.return: marks the publish in flight it belongs to; its content is skipped.
  void on_return(const amqp::Frame& frame);
  void on_channel_closed(std::uint16_t code, const std::string& text, std::int64_t now_ms);
  void confirm(std::uint64_t tag, bool multiple, bool ack);
  void finish(Ticket ticket, retry::FallbackCause failure, std::string why);

  void send(amqp::Bytes frames);
  Output output_;
  std::optional<std::uint16_t> channel_;
  std::uint32_t frame_max_ = 131072;
  State state_ = State::closed;
  std::deque<PublishRequest> waiting_;
  std::map<std::uint64_t, InFlight> in_flight_;  // by publish sequence number
  std::uint64_t next_seq_ = 0;
  std::unordered_map<std::string, QueueInfo> queues_;
  std::deque<std::string> declaring_;  // queue names awaiting declare-ok, in order
  std::uint64_t skip_content_ = 0;     // body bytes of a basic.return still to skip
  bool skip_header_ = false;
};

}  // namespace nackguard::session
