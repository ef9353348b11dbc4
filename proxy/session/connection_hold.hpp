#pragma once
// The end of a client's connection, held while deliveries its consumer's crash gave up are
// taken over (session_core_end.cpp): its connection.close kept, or its EOF noted (the client
// side closed, the broker side still open). A copy's confirm waits 30 s at most (guard.cpp),
// and the settlements release the hold: kCrashHoldMs only keeps it from waiting for ever
// should none come. A gone client's broker side then ends with a connection.close of the
// proxy's, whose close-ok is awaited kGoneCloseOkMs at most.

#include <cstdint>

#include "proxy/amqp/bytes.hpp"
#include "proxy/session/held_close.hpp"
#include "proxy/session/waited.hpp"

namespace nackguard::session {

class ConnectionHold {
 public:
  static constexpr std::int64_t kCrashHoldMs = HeldClose::kHeldCloseMs;
  static constexpr std::int64_t kGoneCloseOkMs = 10000;

  // A close is held, or a gone client's end.
  bool held() const { return close_.held() || gone_; }
  bool close_held() const { return close_.held(); }
  bool gone() const { return gone_; }
  // `now_ms`: the session's clock, -1 before its first tick (the next tick dates it).
  void hold_close(amqp::ByteView close, std::int64_t now_ms) { close_.hold(close, now_ms); }
  void hold_gone(std::int64_t now_ms) {
    gone_ = true;
    gone_waited_.start(now_ms);
  }
  // The tick's part: true once held kCrashHoldMs; from the client's going, if it went (an EOF
  // after a held close starts the bound again).
  bool overdue(std::int64_t now_ms) {
    return gone_ ? gone_waited_.past(now_ms, kCrashHoldMs) : close_.overdue(now_ms);
  }
  // The client's close, to send; it is held no more.
  amqp::Bytes take_close() { return close_.take(); }
  // The gone client's connection is ended now, or the connection ended otherwise.
  void release_gone() { gone_ = false; }
  void drop() {
    close_.drop();
    gone_ = false;
  }

  // The proxy's connection.close for a gone client went out: nothing else may follow it.
  void mark_gone_close_sent(std::int64_t now_ms) {
    gone_close_sent_ = true;
    close_ok_waited_.start(now_ms);
  }
  bool gone_close_sent() const { return gone_close_sent_; }
  // The tick's part: true once its close-ok has been awaited kGoneCloseOkMs.
  bool gone_close_overdue(std::int64_t now_ms) {
    return close_ok_waited_.past(now_ms, kGoneCloseOkMs);
  }

 private:
  HeldClose close_;  // the client's connection.close: a held close too
  bool gone_ = false;
  Waited gone_waited_;
  bool gone_close_sent_ = false;
  Waited close_ok_waited_;
};

}  // namespace nackguard::session
