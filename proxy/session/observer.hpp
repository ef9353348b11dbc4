#pragma once
// The narrow interface through which the session reports what it tracks. The redelivery
// logic implements it; the session itself decides nothing about policies.

#include "proxy/amqp/frame.hpp"
#include "proxy/session/delivery.hpp"

namespace nackguard::session {

class SessionObserver {
 public:
  virtual ~SessionObserver() = default;

  // The connection reached connection.open-ok; `vhost` is the client's virtual host.
  virtual void on_open(const std::string& vhost) { (void)vhost; }
  // A delivery's content header arrived. Returning withhold keeps it (and its body) from the
  // client; the proxy then owns it and must settle it with Session::settle_withheld.
  virtual Verdict on_delivery(const Delivery& delivery) {
    (void)delivery;
    return Verdict::forward;
  }
  // A body frame of a withheld delivery.
  virtual void on_withheld_body(const Delivery& delivery, amqp::ByteView body) {
    (void)delivery, (void)body;
  }
  // The client acked, nacked or rejected a delivery (one call per tag, multiple expanded).
  virtual void on_settled(const Delivery& delivery, SettleKind kind, bool requeue) {
    (void)delivery, (void)kind, (void)requeue;
  }
  // The broker will deliver this message again: a requeue, a recover, or a channel or
  // connection that ended while it was unacked. Called once per delivery.
  virtual void on_returned(const Delivery& delivery, ReturnCause cause) {
    (void)delivery, (void)cause;
  }
  // A frame from the broker on the channel the proxy reserved for itself.
  virtual void on_proxy_channel_frame(const amqp::Frame& frame) { (void)frame; }
};

}  // namespace nackguard::session
