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
#include "proxy/session/proxy_channel.hpp"
#include "proxy/session/takeover.hpp"

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

// What the guard decides for a delivery it takes over: its copy, which the session publishes on
// the proxy's channel (the copy's Outcome follows), or, when there is none to publish (a
// dead-letter through the broker's own reject, or a copy that could not be built), the outcome
// itself.
struct TakeOver {
  std::optional<PublishRequest> copy;
  Outcome at_once;  // without a copy
  const Ticket& ticket() const { return copy ? copy->ticket : at_once.ticket; }
};

// The observer's answer when the client gives a delivery back, or its close or crash does.
// take_over without a value (on_returned, a held-back delivery only): on_taken_over follows
// once the delivery's body is taken from its buffered frames.
struct ReturnDecision {
  ReturnAction action = ReturnAction::forward;
  std::optional<TakeOver> take_over;
};

class SessionObserver {
 public:
  virtual ~SessionObserver() = default;

  // The connection reached connection.open-ok.
  virtual void on_open(const ConnectionFacts& facts) { (void)facts; }
  // A delivery's content header arrived (or, after need_body, its whole body). A delivery
  // taken over here never reaches the client; the proxy owns it, and on_taken_over follows
  // once its body is complete. A held-back delivery is offered again when it is released.
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
  // expanded). A TakeOver keeps the frame from the broker: the delivery is the proxy's, and
  // the session carries the TakeOver out once the client's settlement has been gone through
  // (in a transaction, at its commit; a rollback drops it, and the delivery is the client's
  // again). nullopt: the client's frame goes to the broker.
  virtual std::optional<TakeOver> on_client_return(const Delivery& delivery, ReturnCause cause) {
    (void)delivery, (void)cause;
    return std::nullopt;
  }
  // The proxy owns `delivery` now, and its body is complete: taken over at its delivery
  // (DeliveryPlan::Action::take_over), before the client saw it, or held back at a crash
  // (ReturnDecision without a value). nullopt: given back to the broker at once (a nack with
  // requeue), as when there is nothing to do.
  virtual std::optional<TakeOver> on_taken_over(const Delivery& delivery) {
    (void)delivery;
    return std::nullopt;
  }
  // How a take-over ended (its copy confirmed or failed, or, without a copy, at once): the
  // settlement returned is written at once. The session calls it only at a moment it can
  // write it (no content sequence of the client's in progress, the channel open); when the
  // channel or the connection ends first, the broker requeues the delivery and the outcome is
  // dropped without a call.
  virtual Settle on_outcome(const Outcome& outcome) {
    const Ticket& t = outcome.ticket;
    return {t.channel, t.broker_tag, t.fallback, true};
  }
  // The proxy's channel uses a queue as it is: it exists with other arguments than asked for.
  virtual void on_queue_notice(const QueueNotice& notice) { (void)notice; }
  // The broker will deliver this message again without a frame from the client to rewrite: a
  // recover, or a channel or connection that ended while it was unacked (or taken over, or held
  // back). Called once per delivery. When the client closes its channel or connection, or goes
  // away, it is called for the deliveries in the client's hands at that moment, with
  // `context.can_take_over`: take_over keeps the delivery from the broker (it becomes taken
  // over, and the close waits for its settlement); the broker requeues the others at the
  // close, without a second call.
  virtual ReturnDecision on_returned(const Delivery& delivery, ReturnCause cause,
                                     const ReturnContext& context) {
    (void)delivery, (void)cause, (void)context;
    return {};
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
};

}  // namespace nackguard::session
