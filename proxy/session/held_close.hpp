#pragma once
// A client's channel.close, held while a delivery on the channel is taken over and not yet
// settled (its copy awaits the broker's confirm) or a cancel of the proxy's is pending
// (SessionCore::hold_client_close). Forwarded at once, the close would hand the original back to
// the broker, the copy would be a duplicate, and the ack after the confirm a frame on a closed
// channel (the broker ends the connection with 504). A copy's confirm waits 30 s at most
// (guard.cpp), and its settlement releases the close: kHeldCloseMs only keeps a client from
// waiting for ever should none come.

#include <cstdint>

#include "proxy/amqp/bytes.hpp"
#include "proxy/session/waited.hpp"

namespace nackguard::session {

class HeldClose {
 public:
  static constexpr std::int64_t kHeldCloseMs = 45000;

  bool held() const { return !frame_.empty(); }
  // `now_ms`: the session's clock, -1 before its first tick (the next tick dates it).
  void hold(amqp::ByteView close, std::int64_t now_ms) {
    frame_.assign(close.begin(), close.end());
    waited_.start(now_ms);
  }
  // The tick's part: true once the close has been held kHeldCloseMs.
  bool overdue(std::int64_t now_ms) { return held() && waited_.past(now_ms, kHeldCloseMs); }
  // The close, to send; nothing is held any more.
  amqp::Bytes take() {
    amqp::Bytes close = std::move(frame_);
    frame_.clear();
    return close;
  }
  // The broker ends the channel: the client's close crossed it, and goes nowhere.
  void drop() { frame_.clear(); }

 private:
  amqp::Bytes frame_;
  Waited waited_;
};

}  // namespace nackguard::session
