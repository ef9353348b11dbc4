#pragma once
// A channel's suspect gate. A suspect (a message whose earlier delivery a consumer's crash
// followed) is handed out alone: while the client holds it, the gate is closed and the
// deliveries after it wait in the channel's held_back (DeliveryRouter). The gate opens when
// the client settles the suspect, when the channel gives everything back (its end, a crash),
// or when the client sits on the suspect for SessionOptions::suspect_hold_ms: a client that
// acks in batches would otherwise wait for ever. That wait is also the bound of a suspect held
// back until the client's hands are empty (ChannelState::suspect_waits).

#include <cstdint>

namespace nackguard::session {

class SuspectGate {
 public:
  bool closed() const { return suspect_ != 0; }
  // The client tag of the suspect in the client's hands; 0 when the gate is open.
  std::uint64_t suspect() const { return suspect_; }
  // `client_tag`, a suspect, was handed out.
  void close(std::uint64_t client_tag) { suspect_ = client_tag; }
  void open() { suspect_ = 0; }
  // The client settled `client_tag`, or it was taken from it: true if that opened the gate.
  bool settled(std::uint64_t client_tag) {
    if (suspect_ == 0 || client_tag != suspect_) return false;
    suspect_ = 0;
    return true;
  }
  // The tick's part (Session::on_tick), about once a second. `waiting`: deliveries wait behind
  // the suspect, or a suspect waits for the client's hands to be empty. True once that has
  // lasted `hold_ms`: the gate is open, the caller hands out the next one and says how it
  // went with waited_again().
  bool overdue(std::int64_t now_ms, std::int64_t hold_ms, bool waiting) {
    if (!waiting) {
      waiting_since_ms_ = -1;
      return false;
    }
    if (waiting_since_ms_ < 0) {
      waiting_since_ms_ = now_ms;
      return false;
    }
    if (now_ms - waiting_since_ms_ < hold_ms) return false;
    suspect_ = 0;
    return true;
  }
  // After overdue(): what still waits behind the one just handed out waits from now.
  void waited_again(std::int64_t now_ms, bool still_waiting) {
    waiting_since_ms_ = still_waiting ? now_ms : -1;
  }

 private:
  std::uint64_t suspect_ = 0;
  // When the tick first saw the wait; -1 when nothing waits.
  std::int64_t waiting_since_ms_ = -1;
};

}  // namespace nackguard::session
