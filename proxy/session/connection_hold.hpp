#pragma once
// The end of a client's connection, held while deliveries its consumer's crash gave up are
// taken over (session_core_end.cpp): its connection.close kept, or its EOF noted (the client
// side closed, the broker side still open). A copy's confirm waits 30 s at most (guard.cpp),
// and the settlements release the hold: kCrashHoldMs only keeps it from waiting for ever
// should none come. A gone client's broker side then ends with a connection.close of the
// proxy's, whose close-ok is awaited kGoneCloseOkMs at most.

#include <cstdint>

#include "proxy/amqp/bytes.hpp"

namespace nackguard::session {

class ConnectionHold {
 public:
  static constexpr std::int64_t kCrashHoldMs = 45000;
  static constexpr std::int64_t kGoneCloseOkMs = 10000;

  // A close is held, or a gone client's end.
  bool held() const { return !close_.empty() || gone_; }
  bool close_held() const { return !close_.empty(); }
  bool gone() const { return gone_; }
  // `now_ms`: the session's clock, -1 before its first tick (the next tick dates it).
  void hold_close(amqp::ByteView close, std::int64_t now_ms) {
    close_.assign(close.begin(), close.end());
    since_ms_ = now_ms;
  }
  void hold_gone(std::int64_t now_ms) {
    gone_ = true;
    since_ms_ = now_ms;
  }
  // The tick's part: true once held kCrashHoldMs.
  bool overdue(std::int64_t now_ms) {
    if (since_ms_ < 0) since_ms_ = now_ms;
    return now_ms - since_ms_ >= kCrashHoldMs;
  }
  // The client's close, to send; it is held no more.
  amqp::Bytes take_close() {
    amqp::Bytes close = std::move(close_);
    close_.clear();
    return close;
  }
  // The gone client's connection is ended now, or the connection ended otherwise.
  void release_gone() { gone_ = false; }
  void drop() {
    close_.clear();
    gone_ = false;
  }

  // The proxy's connection.close for a gone client went out: nothing else may follow it.
  void mark_gone_close_sent(std::int64_t now_ms) {
    gone_close_sent_ = true;
    gone_close_ms_ = now_ms;
  }
  bool gone_close_sent() const { return gone_close_sent_; }
  // The tick's part: true once its close-ok has been awaited kGoneCloseOkMs.
  bool gone_close_overdue(std::int64_t now_ms) {
    if (gone_close_ms_ < 0) gone_close_ms_ = now_ms;
    return now_ms - gone_close_ms_ >= kGoneCloseOkMs;
  }

 private:
  amqp::Bytes close_;
  bool gone_ = false;
  std::int64_t since_ms_ = -1;
  bool gone_close_sent_ = false;
  std::int64_t gone_close_ms_ = -1;
};

}  // namespace nackguard::session
