#pragma once
// The delivery router: the broker's deliveries on their way to the client. A delivery's
// method, content header and body frames are forwarded, taken over by the proxy, or held back
// behind a suspect delivery, as the observer plans (DeliveryPlan), and recorded in their
// channel as unacked once complete.
//
// Sans-io, and it never calls the session: the frames for the client go into its Outbox, and
// what the observer asks for a delivery it took over (on_taken_over) is kept for the session
// to carry out (take_take_overs). The session checks the content sequence before a frame gets here.

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "proxy/amqp/frame.hpp"
#include "proxy/session/channel.hpp"
#include "proxy/session/observer.hpp"
#include "proxy/session/outbox.hpp"

namespace nackguard::session {

class DeliveryRouter {
 public:
  // `to_client`: where deliveries go. `clock_ms`: the session's clock (-1 before it starts),
  // which stamps when a delivery was handed out. All must outlive the router.
  DeliveryRouter(SessionObserver& observer, retry::BodyBudget* budget, Outbox& to_client,
                 const std::int64_t& clock_ms)
      : observer_(observer), budget_(budget), to_client_(to_client), clock_ms_(clock_ms) {}
  DeliveryRouter(const DeliveryRouter&) = delete;
  DeliveryRouter& operator=(const DeliveryRouter&) = delete;

  // The session handles a new batch of bytes: frames read before may be gone, so a delivery's
  // method frame from an earlier batch is forwarded from the router's copy.
  void next_pass() { ++pass_; }

  // A basic.deliver or get-ok method frame: `delivery` begins on `ch`. Nothing goes out
  // until its content header arrives.
  void begin(ChannelState& ch, const amqp::Frame& frame, Delivery delivery);
  // The incoming delivery's content header and body frames, in sequence; ch.from_broker
  // already counts `frame`. Once it is complete, complete() follows.
  void header(ChannelState& ch, const amqp::Frame& frame);
  void body(ChannelState& ch, const amqp::Frame& frame);
  void complete(ChannelState& ch);

  // Hands out the next delivery held back on `ch`, unless none is or a suspect delivery still
  // blocks them, or it is a suspect that waits for the client's hands to be empty (unless
  // `even_with_others_in_hand`): false then. Only at a frame boundary towards the client (the
  // caller checks); the caller carries out the take-overs of each before the next.
  bool release_next(ChannelState& ch, bool even_with_others_in_hand = false);
  // Whether some channel may have deliveries to release.
  bool any_held_back() const { return channels_with_held_back_ > 0; }
  // The held-back delivery `broker_tag` is the proxy's now (its client left before it was
  // handed out): its body taken from its buffered frames, the observer hears of it
  // (on_taken_over; take_take_overs). False if no such delivery is held back.
  bool take_over_held_back(ChannelState& ch, std::uint64_t broker_tag);
  // The channel ends: its held-back deliveries, taken out of the router's count.
  std::deque<ChannelState::HeldBackDelivery> take_held_back(ChannelState& ch);
  // Every channel is gone at once (the connection's end), without take_held_back.
  void forget_channels() { channels_with_held_back_ = 0; }

  // The bookkeeping of the last frame, put off until its bytes are sent: the body hash of a
  // forwarded delivery and, once it is complete, its unacked record. The session calls this
  // before it handles the next frame and before anything else reads or changes a channel or
  // the input buffer the frame lies in (Session::finish_bookkeeping).
  bool has_deferred() const { return deferred_.ch != nullptr; }
  void settle_deferred();

  // A delivery taken over, and what the observer decided for it (on_taken_over).
  struct TakenOver {
    std::uint16_t channel = 0;
    std::uint64_t broker_tag = 0;
    std::optional<TakeOver> take_over;
  };
  // The deliveries taken over since the last call, in order, for the session to carry out.
  bool has_take_overs() const { return !take_overs_.empty(); }
  std::vector<TakenOver> take_take_overs() { return std::exchange(take_overs_, {}); }

 private:
  // The incoming delivery's header came past the body budget: forwarded untracked.
  void forward_untracked(ChannelState& ch, const amqp::Frame& frame);
  // A delivery whose frames were all buffered: carry out `plan` on it.
  void dispatch_buffered(ChannelState& ch, Delivery delivery, amqp::Bytes frames,
                         DeliveryPlan plan);
  // A suspect decided and buffered waits at the front of the held-back deliveries.
  void hold_suspect(ChannelState& ch, ChannelState::HeldBackDelivery held);
  // The proxy owns `delivery` now: the observer hears of it.
  void take_over(ChannelState& ch, Delivery delivery);
  // Hands a delivery to the client under the next client tag: its method frame (the tag
  // patched when the two sequences differ). An unpatched frame goes out as `original` when
  // given: the bytes as they were read.
  void hand_out(ChannelState& ch, Delivery& delivery, amqp::Bytes& method_frame,
                amqp::ByteView original = {});
  // The incoming delivery's method frame where it was read, if it came in this pass (and is
  // therefore still there); otherwise empty.
  amqp::ByteView original_method(const ChannelState& ch) const {
    return ch.routing.method_pass == pass_ ? ch.routing.method_raw : amqp::ByteView{};
  }

  // What settle_deferred() still owes `ch`: a body frame's payload to hash, where it was read,
  // and, when `record`, the record of its incoming delivery, complete (its digest taken first
  // when `digest`).
  struct Deferred {
    ChannelState* ch = nullptr;
    amqp::ByteView body;
    bool record = false;
    bool digest = false;
  };

  SessionObserver& observer_;
  retry::BodyBudget* budget_;
  Outbox& to_client_;
  const std::int64_t& clock_ms_;
  std::uint64_t pass_ = 0;
  std::size_t channels_with_held_back_ = 0;  // channels whose held_back queue may be released
  std::vector<TakenOver> take_overs_;
  Deferred deferred_;
};

}  // namespace nackguard::session
