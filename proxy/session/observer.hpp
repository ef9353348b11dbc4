#pragma once
// The narrow interface through which the session reports what it tracks. The redelivery
// logic implements it; the session itself decides nothing about policies.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "proxy/amqp/frame.hpp"
#include "proxy/amqp/methods.hpp"
#include "proxy/session/delivery.hpp"

namespace nackguard::session {

// What the connection agreed on, complete when connection.open-ok arrives.
struct ConnectionFacts {
  std::string vhost;
  // The channel the proxy keeps for itself; none when the broker's channel_max left none.
  std::optional<std::uint16_t> reserved_channel;
  std::uint32_t frame_max = 0;
  std::string broker_version;  // the broker's "version" server property; empty if none
  std::string client_name;     // Session::client_name()
};

// A settlement, by the proxy, of a delivery it took over.
struct Settle {
  std::uint16_t channel = 0;
  std::uint64_t broker_tag = 0;
  SettleKind kind = SettleKind::ack;
  bool requeue = false;
};

// One thing the observer asks the session to do. The observer never calls into the session:
// its calls return these, and the session applies them in order once the call has returned.
struct ObserverAction {
  enum class Kind : std::uint8_t { send, settle };
  Kind kind = Kind::send;
  amqp::Bytes frames;  // send: whole frames for the broker, on the proxy's channel
  Settle settle;       // settle: whether it went out is told to on_settle_written
};
using ObserverActions = std::vector<ObserverAction>;

class SessionObserver {
 public:
  virtual ~SessionObserver() = default;

  // The connection reached connection.open-ok.
  virtual void on_open(const ConnectionFacts& facts) { (void)facts; }
  // A delivery's content header arrived (or, after need_body, its whole body). A delivery
  // taken over here never reaches the client; the proxy owns it and settles it with a Settle
  // action. A held-back delivery is offered again when it is released.
  virtual DeliveryPlan on_delivery(const Delivery& delivery) {
    (void)delivery;
    return {};
  }
  // Whether on_delivery plans every first delivery (basic.deliver not redelivered, no headers
  // table in its content header) as forwarded (Action::forward), whatever it keeps of it.
  // True lets the relay write such a delivery before the session handles it
  // (Session::receive_input). The base forwards every delivery.
  virtual bool forwards_first_deliveries() const { return true; }
  // A delivery is about to wait in the proxy behind a suspect one (crash_suspect in the tracker),
  // where a crash would give it back without the proxy deciding anything. True: decide it now
  // instead (on_delivery follows at once), e.g. because one more return would pass the broker's
  // limit.
  virtual bool decide_before_holding_back(const Delivery& delivery) {
    (void)delivery;
    return false;
  }
  // The client acked, or nacked or rejected without requeue: the delivery is settled.
  virtual void on_settled(const Delivery& delivery, SettleKind kind) { (void)delivery, (void)kind; }
  // The client nacked or rejected with requeue=true (one call per delivery, multiple
  // expanded). take_over keeps the frame from the broker: the delivery is taken over, and
  // on_taken_over follows once the client's settlement has been gone through (in a
  // transaction, at its commit).
  virtual ReturnAction on_client_return(const Delivery& delivery, ReturnCause cause) {
    (void)delivery, (void)cause;
    return ReturnAction::forward;
  }
  // The proxy owns `delivery` now, and its body is complete (the retained body, if asked for,
  // is in place): taken over at its delivery (DeliveryPlan::Action::take_over), before the
  // client saw it, or at the client's requeue (ReturnAction::take_over). The actions returned
  // publish its copy, or settle it.
  virtual ObserverActions on_taken_over(const Delivery& delivery) {
    (void)delivery;
    return {};
  }
  // Once per Settle action: `written` when its frame went into the broker's outbox (a
  // settlement waits for the end of a content sequence the client is sending); false when it
  // never will be: refused at once (the channel or the connection is closing, or the delivery
  // is no longer taken over), or dropped while it waited (the broker closed the channel, the
  // connection ended). Dropped, it settles nothing: the broker requeues the delivery.
  virtual void on_settle_written(const Settle& settle, bool written) {
    (void)settle, (void)written;
  }
  // On a channel in transaction mode, a requeue taken over (on_client_return) is carried out
  // only at the client's tx.commit (on_taken_over then follows). A tx.rollback first drops it:
  // the delivery is the client's, unacked, again.
  virtual void on_takeover_dropped(const Delivery& delivery) { (void)delivery; }
  // The broker will deliver this message again without a frame from the client to rewrite: a
  // recover, or a channel or connection that ended while it was unacked (or taken over, or held
  // back). Called once per delivery. When the client closes its channel or connection, or goes
  // away, it is called for the deliveries in the client's hands at that moment, with
  // `context.can_take_over`: take_over keeps the delivery from the broker (it becomes taken
  // over, on_taken_over follows, and the close waits for its settlement); the broker requeues
  // the others at the close, without a second call.
  virtual ReturnAction on_returned(const Delivery& delivery, ReturnCause cause,
                                   const ReturnContext& context) {
    (void)delivery, (void)cause, (void)context;
    return ReturnAction::forward;
  }
  // Ends a batch of on_returned calls for one channel (its end, or a recover).
  virtual void on_returns_done() {}
  // The client declares a queue (not passively); the broker may still refuse it.
  virtual void on_queue_declare(const amqp::QueueDeclare& declare) { (void)declare; }
  // How long the client may hold `delivery` unacked before the proxy closes its channel
  // (the policy's ack_timeout), in milliseconds; 0: no limit.
  virtual std::int64_t ack_timeout_ms(const Delivery& delivery) {
    (void)delivery;
    return 0;
  }
  // The proxy closes the client's channel: `delivery` was held unacked `held_ms`, past its
  // ack_timeout. Its return (ReturnCause::consumer_timeout) follows at the channel's end.
  virtual void on_ack_timeout(const Delivery& delivery, std::int64_t held_ms) {
    (void)delivery, (void)held_ms;
  }
  // A frame from the broker on the channel the proxy reserved for itself.
  virtual ObserverActions on_proxy_channel_frame(const amqp::Frame& frame) {
    (void)frame;
    return {};
  }
  // About once a second (Session::on_tick): for work with deadlines of its own.
  virtual ObserverActions on_tick() { return {}; }
};

}  // namespace nackguard::session
