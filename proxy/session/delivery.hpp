#pragma once
// What the session knows of one delivery between basic.deliver (or get-ok) and its settlement.

#include <cstdint>
#include <memory>
#include <string>

#include "proxy/amqp/bytes.hpp"
#include "proxy/amqp/properties.hpp"
#include "proxy/retry/body_budget.hpp"

namespace nackguard::session {

// XXH3-64 of a delivery's body. When the whole body is retained it is computed from the
// retained bytes on first use instead of as the body passes: few deliveries are ever asked
// for it (only an identity that falls back to the body needs it).
class BodyHash {
 public:
  BodyHash() = default;
  BodyHash(std::uint64_t value) : value_(value) {}  // NOLINT: used as a plain number
  BodyHash& operator=(std::uint64_t value) {
    value_ = value;
    known_ = true;
    source_.reset();
    return *this;
  }
  // The hash of `body`'s bytes, computed when first read.
  void defer_to(const std::shared_ptr<retry::RetainedBody>& body) {
    source_ = body;
    known_ = true;
  }
  // Not computed: the guard said no identity would need it (DeliveryPlan::hash_body).
  void forget() {
    value_ = 0;
    known_ = false;
    source_.reset();
  }
  bool known() const { return known_; }
  operator std::uint64_t() const;  // NOLINT: reads as the number it stands for

 private:
  bool known_ = true;
  mutable std::uint64_t value_ = 0;
  // Weak: the hash must not keep a body alive, and so out of the body budget's count.
  mutable std::weak_ptr<const retry::RetainedBody> source_;
};

struct Delivery {
  std::uint16_t channel = 0;
  std::uint64_t broker_tag = 0;  // the tag the broker gave it
  std::uint64_t client_tag =
      0;                     // the tag the client saw; 0 while taken over before the client saw it
  std::string consumer_tag;  // empty for basic.get
  std::string queue;         // empty if the consumer or get was not seen
  std::string exchange;
  std::string routing_key;
  bool redelivered = false;
  bool no_ack = false;
  bool from_get = false;
  bool taken_over = false;  // the proxy kept it from the client and owns its settlement
  bool held_back = false;   // waiting in the proxy behind a suspect delivery
  // A crash suspect, handed out alone: while the client holds it, later deliveries on the
  // channel are held back.
  bool suspect = false;
  bool settling = false;  // taken over, and the proxy's ack, nack or reject is on its way
  // Handed out with the redelivered bit set though the broker's is not (DeliveryPlan).
  bool show_redelivered = false;
  // Delivered after the client closed its channel or connection, or went away: the client
  // never sees it (ChannelState::client_left).
  bool unseen = false;
  // Taken over: the job of the TakeOver being carried out (Ticket::job, its low 32 bits: in
  // the padding after the flags), which its outcome must name to settle it; 0 while none is.
  std::uint32_t take_over_job = 0;
  amqp::Bytes header_payload;  // the raw content header: properties are decoded on demand
  std::uint64_t body_size = 0;
  BodyHash body_hash;  // XXH3-64 of the body, valid once body_complete
  bool body_complete = false;
  std::shared_ptr<retry::RetainedBody> body;  // the body, when the observer asked to retain it
  std::uint64_t cookie = 0;                   // the observer's own per-delivery value
  // When it was handed to the client (the session's last tick, Session::on_tick's clock);
  // -1 before the first tick.
  std::int64_t handed_out_ms = -1;

  // Decodes the content header; false if it is malformed.
  bool decode_header(amqp::ContentHeader& out) const {
    return amqp::decode_content_header(header_payload, out) == amqp::HeaderError::none;
  }
};

// Why the broker will deliver a message again.
// connection_closed: the client's connection ended (it closed, crashed or sent garbage);
// broker_lost: the broker's side ended or closed the connection, which is no consumer's doing;
// also the deliveries of a channel closed because another delivery's ack timed out.
// consumer_timeout: the delivery whose ack timed out (RabbitMQ's consumer_timeout closed the
// channel with 406).
// unseen: handed out after the client closed its channel or connection, or went away: the
// client never saw it.
enum class ReturnCause {
  nack,
  reject,
  recover,
  channel_closed,
  connection_closed,
  broker_lost,
  consumer_timeout,
  unseen
};
std::string_view to_string(ReturnCause cause);

enum class SettleKind { ack, nack, reject };

// Appends the basic.ack, basic.nack or basic.reject of `tag` on `channel`: the one writer of a
// settlement, the client's rewritten ones and the proxy's own alike (settlement.cpp).
void append_settlement(amqp::Bytes& out, std::uint16_t channel, SettleKind kind, std::uint64_t tag,
                       bool multiple, bool requeue);

// The observer's choice for a delivery, taken when its content header has arrived or, for
// need_body, once the whole body has.
struct DeliveryPlan {
  enum class Action { forward, take_over, need_body };
  Action action = Action::forward;
  bool retain_body = false;  // keep the body with the delivery (it may be republished)
  // Without a retained body, hash the body as it passes (an identity may fall back to it).
  // false: the identity resolves before `body`, so Delivery::body_hash stays unknown.
  bool hash_body = true;
  bool suspect = false;  // hand it out alone: hold back later ones until it is settled
  // Hand it out with the redelivered bit set: a copy of nackguard's, a retry the broker
  // delivers as a new message, which the client would have seen redelivered without the proxy.
  bool show_redelivered = false;
  std::uint64_t cookie = 0;  // stored in Delivery::cookie
};

// The observer's choice when the client gives a delivery back, or its close or crash does.
enum class ReturnAction { forward, take_over };

// How the end of a channel or connection found a delivery (SessionObserver::on_returned).
struct ReturnContext {
  // The only delivery in the consumer's hands: on its channel for a channel's end, on the
  // connection for the connection's end. A crash is then the message's doing.
  bool solo = false;
  // The session can keep the delivery from the broker until its copy is settled: the client
  // closed its channel or connection, or went away, and the broker side is still open.
  bool can_take_over = false;
};

}  // namespace nackguard::session
