#pragma once
// The narrow interface through which the session reports what it tracks. The redelivery
// logic implements it; the session itself decides nothing about policies.

#include "proxy/amqp/frame.hpp"
#include "proxy/amqp/methods.hpp"
#include "proxy/session/delivery.hpp"

namespace nackguard::session {

class SessionObserver {
 public:
  virtual ~SessionObserver() = default;

  // The connection reached connection.open-ok; `vhost` is the client's virtual host.
  virtual void on_open(const std::string& vhost) { (void)vhost; }
  // A delivery's content header arrived (or, after need_body, its whole body). A withheld
  // delivery never reaches the client; the proxy owns it and settles it with
  // Session::settle_withheld. A held delivery is offered again when it is released.
  virtual DeliveryPlan on_delivery(const Delivery& delivery) {
    (void)delivery;
    return {};
  }
  // A delivery is about to wait in the proxy behind an exclusive one (a crash suspect), where a
  // crash would give it back without the proxy deciding anything. True: decide it now instead
  // (on_delivery follows at once), e.g. because one more return would pass the broker's limit.
  virtual bool decide_before_holding(const Delivery& delivery) {
    (void)delivery;
    return false;
  }
  // A withheld delivery's body is complete (its retained body, if asked for, is in place).
  virtual void on_withheld(const Delivery& delivery) { (void)delivery; }
  // The client acked, or nacked or rejected without requeue: the delivery is settled.
  virtual void on_settled(const Delivery& delivery, SettleKind kind) { (void)delivery, (void)kind; }
  // The client nacked or rejected with requeue=true (one call per delivery, multiple
  // expanded). take_over keeps the frame from the broker: the delivery becomes withheld and
  // on_taken_over follows.
  virtual ReturnAction on_client_return(const Delivery& delivery, ReturnCause cause) {
    (void)delivery, (void)cause;
    return ReturnAction::forward;
  }
  virtual void on_taken_over(const Delivery& delivery) { (void)delivery; }
  // On a channel in transaction mode, a requeue taken over (on_client_return) is carried out
  // only at the client's tx.commit (on_taken_over then follows). A tx.rollback first drops it:
  // the delivery is the client's, unacked, again.
  virtual void on_takeover_dropped(const Delivery& delivery) { (void)delivery; }
  // The broker will deliver this message again without a frame from the client to rewrite: a
  // recover, or a channel or connection that ended while it was unacked (or withheld, or held).
  // Called once per delivery.
  virtual void on_returned(const Delivery& delivery, ReturnCause cause) {
    (void)delivery, (void)cause;
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
  virtual void on_proxy_channel_frame(const amqp::Frame& frame) { (void)frame; }
};

}  // namespace nackguard::session
