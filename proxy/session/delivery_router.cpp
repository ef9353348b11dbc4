#include "proxy/session/delivery_router.hpp"

#include <algorithm>
#include <limits>

#include "proxy/amqp/method_codec.hpp"
#include "proxy/amqp/properties.hpp"

namespace nackguard::session {

using amqp::ByteView;
using amqp::Frame;
namespace mid = amqp::mid;

namespace {

// Where the delivery tag sits in a deliver or get-ok method payload: after the class and
// method ids, and for deliver after the consumer tag too.
std::size_t delivery_tag_offset(std::uint32_t key, const std::string& consumer_tag) {
  return 4 + (key == mid::basic_deliver ? 1 + consumer_tag.size() : 0);
}

void patch_u64(amqp::Bytes& bytes, std::size_t at, std::uint64_t value) {
  for (int i = 0; i < 8; ++i) bytes[at + i] = static_cast<std::uint8_t>(value >> (56 - 8 * i));
}

// What buffering a delivery's frames costs: its method and header frames, its body, and the
// overhead of body frames of at least the smallest frame_max. A hostile broker's body_size
// near 2^64 saturates the sum instead of wrapping it to a small reservation; it is then
// refused like any body too large for the budget, and the delivery is forwarded.
std::uint64_t buffered_frames_cost(std::uint64_t method_and_header, std::uint64_t body_size) {
  constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
  // At most 8 * (2^64 / 4096 + 1): no wrap.
  std::uint64_t overhead = amqp::kFrameOverhead * (body_size / amqp::kFrameMinSize + 1);
  if (body_size > kMax - overhead - method_and_header) return kMax;
  return method_and_header + body_size + overhead;
}

// Whether the record of `d` fits within the body budget (no budget: always).
bool admit_record(ChannelState& ch, const Delivery& d, retry::BodyBudget* budget) {
  ch.use_budget(budget);
  if (!budget || budget->has_room(ChannelState::record_cost(d))) return true;
  budget->note_untracked();
  return false;
}

// The method frame at the front of buffered frames, and the body bytes after the header.
struct BufferedParts {
  std::size_t method_size = 0;
  amqp::Bytes body;
};
BufferedParts split_buffered(const amqp::Bytes& frames, bool want_body) {
  BufferedParts parts;
  amqp::FrameDecoder decoder(std::numeric_limits<std::uint32_t>::max());
  std::size_t at = 0;
  int index = 0;
  while (at < frames.size()) {
    amqp::FrameResult r = decoder.decode(ByteView(frames).subspan(at));
    if (r.status != amqp::FrameResult::Status::frame) break;
    if (index == 0) parts.method_size = r.frame.raw.size();
    if (index >= 2 && want_body) {
      parts.body.insert(parts.body.end(), r.frame.payload.begin(), r.frame.payload.end());
    }
    at += r.frame.raw.size();
    ++index;
  }
  return parts;
}

// A suspect is handed out alone: while the client holds other deliveries of the channel, it
// waits (held back at the front) for their settlements. A basic.get has to be answered.
bool waits_for_empty_hands(const ChannelState& ch, const Delivery& d, const DeliveryPlan& plan) {
  return plan.action == DeliveryPlan::Action::forward && plan.suspect && !d.no_ack && !d.from_get &&
         ch.unacked_count() > 0;
}

}  // namespace

void DeliveryRouter::begin(ChannelState& ch, const Frame& frame, Delivery delivery) {
  delivery.channel = frame.channel;
  delivery.unseen = ch.client_left;
  ch.note_broker_tag(delivery.broker_tag);
  ch.incoming = std::move(delivery);
  ch.routing.method_frame.assign(frame.raw.begin(), frame.raw.end());
  ch.routing.method_raw = frame.raw;
  ch.routing.method_pass = pass_;
  ch.routing.route = IncomingRoute::Route::forward;
  ch.routing.untracked = false;
  ch.routing.hashed = true;
  ch.routing.plan.reset();
  ch.from_broker.phase = ContentState::Phase::awaiting_header;
}

void DeliveryRouter::header(ChannelState& ch, const Frame& frame) {
  Delivery& d = *ch.incoming;
  d.header_payload.assign(frame.payload.begin(), frame.payload.end());
  d.body_size = amqp::peek_body_size(frame.payload).value_or(0);
  if (!ch.routing.hasher) ch.routing.hasher = std::make_unique<BodyHasher>();
  ch.routing.hasher->reset();
  if (!d.no_ack && !admit_record(ch, d, budget_)) return forward_untracked(ch, frame);

  // One the client will never see is decided at once, not held back behind a suspect.
  bool gated = !d.from_get && !d.unseen && (ch.gate.closed() || !ch.held_back.empty()) &&
               !observer_.decide_before_holding_back(d);
  DeliveryPlan plan;
  if (gated) {
    d.held_back = true;
    plan.action = DeliveryPlan::Action::need_body;
  } else {
    plan = observer_.on_delivery(d);
    d.cookie = plan.cookie;
  }
  const bool waits = waits_for_empty_hands(ch, d, plan);
  if (plan.action == DeliveryPlan::Action::need_body || waits) {
    std::uint64_t frames_size =
        buffered_frames_cost(ch.routing.method_frame.size() + frame.raw.size(), d.body_size);
    ch.routing.reservation = retry::RetainedBody::make(budget_, frames_size);
    if (ch.routing.reservation) {
      ch.routing.route = IncomingRoute::Route::buffer;
      ch.routing.frames = std::move(ch.routing.method_frame);
      ch.routing.frames.insert(ch.routing.frames.end(), frame.raw.begin(), frame.raw.end());
      if (waits) {
        d.held_back = true;
        ch.routing.plan = plan;
      }
      return;
    }
    // Over the memory budget: hand it out now rather than hold it.
    d.held_back = false;
    if (gated) {
      plan = observer_.on_delivery(d);
      d.cookie = plan.cookie;
    }
    if (plan.action == DeliveryPlan::Action::need_body) plan = DeliveryPlan{};
  }
  ch.routing.hashed = plan.hash_body;
  if (plan.retain_body) {
    d.body = retry::RetainedBody::make(budget_, d.body_size);
    // Within the budget just reserved; without a budget the size is the broker's word only.
    if (d.body && budget_) d.body->bytes.reserve(d.body_size);
  }
  if (plan.action == DeliveryPlan::Action::take_over) {
    ch.routing.route = IncomingRoute::Route::take_over;
    ch.note_owned();
    ch.routing.method_frame.clear();  // its capacity serves the next delivery
    return;
  }
  ch.routing.route = IncomingRoute::Route::forward;
  d.suspect = plan.suspect && !d.no_ack;
  d.show_redelivered = plan.show_redelivered && !d.redelivered;
  hand_out(ch, d, ch.routing.method_frame, original_method(ch));
  ch.routing.method_frame.clear();  // its capacity serves the next delivery
  to_client_.emit(frame.raw);
  ch.to_client = ch.from_broker;
}

void DeliveryRouter::forward_untracked(ChannelState& ch, const Frame& frame) {
  // Handed out as it is, and the observer hears nothing of it, so its returns are not counted
  // (a fallback). No record is kept, only a run of tags (ChannelState::note_untracked); past
  // kMaxUntrackedRuns, a record of its tags alone.
  Delivery& d = *ch.incoming;
  ch.routing.route = IncomingRoute::Route::forward;
  hand_out(ch, d, ch.routing.method_frame, original_method(ch));
  ch.routing.method_frame.clear();
  to_client_.emit(frame.raw);
  ch.to_client = ch.from_broker;
  ch.routing.untracked = ch.note_untracked(d.client_tag, d.broker_tag);
  ChannelState::make_slim(d);
}

void DeliveryRouter::body(ChannelState& ch, const Frame& frame) {
  Delivery& d = *ch.incoming;
  // A retained body is hashed from the retained bytes, if ever asked (BodyHash). A forwarded
  // frame is hashed after it is sent (settle_deferred).
  if (!d.body && ch.routing.hashed) {
    if (ch.routing.route == IncomingRoute::Route::forward) {
      deferred_.ch = &ch;
      deferred_.body = frame.payload;
    } else {
      ch.routing.hasher->update(frame.payload);
    }
  }
  switch (ch.routing.route) {
    case IncomingRoute::Route::forward:
      to_client_.emit(frame.raw);
      ch.to_client = ch.from_broker;
      break;
    case IncomingRoute::Route::take_over:
      break;
    case IncomingRoute::Route::buffer:
      ch.routing.frames.insert(ch.routing.frames.end(), frame.raw.begin(), frame.raw.end());
      return;
  }
  if (d.body) d.body->bytes.insert(d.body->bytes.end(), frame.payload.begin(), frame.payload.end());
}

void DeliveryRouter::complete(ChannelState& ch) {
  Delivery& incoming = *ch.incoming;
  bool digest = false;
  if (incoming.body && incoming.body->bytes.size() == incoming.body_size) {
    incoming.body_hash.defer_to(incoming.body);
  } else if (ch.routing.hashed) {
    digest = true;
  } else {
    incoming.body_hash.forget();
  }
  ch.routing.hashed = true;
  incoming.body_complete = true;
  if (ch.routing.route == IncomingRoute::Route::forward) {
    if (!incoming.no_ack && !ch.routing.untracked) {
      // It stays the channel's incoming delivery until its frames are sent: settle_deferred
      // takes its digest (a body of 0 bytes, or one hashed before) and records it.
      deferred_.ch = &ch;
      deferred_.record = true;
      deferred_.digest = digest;
    } else {
      ch.incoming.reset();
    }
    ch.routing.untracked = false;
    return;
  }
  if (digest) incoming.body_hash = ch.routing.hasher ? ch.routing.hasher->digest() : 0;
  Delivery d = std::move(incoming);
  ch.incoming.reset();
  if (ch.routing.route == IncomingRoute::Route::take_over) return take_over(ch, std::move(d));
  // Route::buffer: its frames were kept until now.
  amqp::Bytes frames = std::move(ch.routing.frames);
  ch.routing.frames.clear();
  auto reservation = std::move(ch.routing.reservation);
  std::optional<DeliveryPlan> decided = std::move(ch.routing.plan);
  ch.routing.plan.reset();
  if (d.held_back) {
    if (ch.held_back.empty()) ++channels_with_held_back_;
    ch.note_owned();
    ch.held_back.push_back({std::move(d), std::move(frames), std::move(reservation), decided});
    return;
  }
  DeliveryPlan plan = observer_.on_delivery(d);
  d.cookie = plan.cookie;
  if (waits_for_empty_hands(ch, d, plan)) {
    hold_suspect(ch, {std::move(d), std::move(frames), std::move(reservation), plan});
    return;
  }
  dispatch_buffered(ch, std::move(d), std::move(frames), plan);
}

void DeliveryRouter::hold_suspect(ChannelState& ch, ChannelState::HeldBackDelivery held) {
  if (ch.held_back.empty()) ++channels_with_held_back_;
  ch.note_owned();
  held.delivery.held_back = true;
  ch.held_back.push_front(std::move(held));
}

void DeliveryRouter::settle_deferred() {
  ChannelState& ch = *deferred_.ch;
  deferred_.ch = nullptr;
  if (!deferred_.body.empty()) ch.routing.hasher->update(deferred_.body);
  deferred_.body = {};
  if (!deferred_.record) return;
  deferred_.record = false;
  Delivery& d = *ch.incoming;
  if (deferred_.digest) d.body_hash = ch.routing.hasher ? ch.routing.hasher->digest() : 0;
  ch.add_unacked(std::move(d));
  ch.incoming.reset();
}

void DeliveryRouter::take_over(ChannelState& ch, Delivery delivery) {
  std::uint64_t tag = delivery.broker_tag;
  if (delivery.from_get) {
    // The client asked with basic.get and must have an answer: the message the broker gave is
    // the proxy's now, so, for the client, the queue had nothing. It asks again.
    amqp::Bytes empty;
    if (amqp::append_method_frame(empty, delivery.channel, amqp::BasicGetEmpty{})) {
      to_client_.emit(empty);
    }
  }
  ch.add_taken_over(std::move(delivery));
  const Delivery* owned = ch.find_taken_over(tag);
  if (!owned) return;
  take_overs_.push_back({owned->channel, tag, observer_.on_taken_over(*owned)});
}

void DeliveryRouter::hand_out(ChannelState& ch, Delivery& d, amqp::Bytes& method_frame,
                              ByteView original) {
  d.client_tag = ch.next_client_tag();
  d.handed_out_ms = clock_ms_;
  const bool renumbered = d.client_tag != d.broker_tag;
  if (renumbered || d.show_redelivered) {
    ByteView payload = ByteView(method_frame).subspan(amqp::kFrameHeaderSize);
    std::size_t at =
        amqp::kFrameHeaderSize +
        delivery_tag_offset(amqp::peek_method_key(payload).value_or(0), d.consumer_tag);
    if (renumbered) {
      ch.note_owned();
      patch_u64(method_frame, at, d.client_tag);
    }
    // The bits octet after the tag: redelivered is its lowest bit, in deliver and get-ok alike.
    if (d.show_redelivered) method_frame[at + 8] |= 0x01;
  }
  if (d.suspect) ch.gate.close(d.client_tag);
  ch.note_handed_out(d.client_tag, d.broker_tag);
  if (!renumbered && !d.show_redelivered && !original.empty()) {
    to_client_.emit(original);  // forwarded from where it was read, not copied again
  } else {
    to_client_.emit(method_frame);
  }
}

void DeliveryRouter::dispatch_buffered(ChannelState& ch, Delivery d, amqp::Bytes frames,
                                       DeliveryPlan plan) {
  if (plan.action == DeliveryPlan::Action::need_body) plan.action = DeliveryPlan::Action::forward;
  d.held_back = false;
  BufferedParts parts = split_buffered(frames, plan.retain_body);
  if (plan.retain_body) {
    d.body = retry::RetainedBody::make(budget_, parts.body.size());
    if (d.body) d.body->bytes = std::move(parts.body);
  }
  if (plan.action == DeliveryPlan::Action::take_over) return take_over(ch, std::move(d));
  d.suspect = plan.suspect && !d.no_ack;
  d.show_redelivered = plan.show_redelivered && !d.redelivered;
  amqp::Bytes method(frames.begin(),
                     frames.begin() + static_cast<std::ptrdiff_t>(parts.method_size));
  hand_out(ch, d, method);
  to_client_.emit(ByteView(frames).subspan(parts.method_size));
  if (!d.no_ack) ch.add_unacked(std::move(d));
}

bool DeliveryRouter::release_next(ChannelState& ch, bool even_with_others_in_hand) {
  if (ch.held_back.empty() || ch.gate.closed()) return false;
  const bool force = even_with_others_in_hand;
  ChannelState::HeldBackDelivery& front = ch.held_back.front();
  if (front.plan && !force && waits_for_empty_hands(ch, front.delivery, *front.plan)) return false;
  ChannelState::HeldBackDelivery h = std::move(front);
  ch.held_back.pop_front();
  if (ch.held_back.empty()) --channels_with_held_back_;
  DeliveryPlan plan;
  if (h.plan) {
    plan = *h.plan;
  } else {
    plan = observer_.on_delivery(h.delivery);
    h.delivery.cookie = plan.cookie;
    if (!force && waits_for_empty_hands(ch, h.delivery, plan)) {
      h.plan = plan;
      hold_suspect(ch, std::move(h));
      return false;
    }
  }
  dispatch_buffered(ch, std::move(h.delivery), std::move(h.frames), plan);
  return true;
}

bool DeliveryRouter::take_over_held_back(ChannelState& ch, std::uint64_t broker_tag) {
  auto it = std::find_if(ch.held_back.begin(), ch.held_back.end(),
                         [&](const auto& h) { return h.delivery.broker_tag == broker_tag; });
  if (it == ch.held_back.end()) return false;
  ChannelState::HeldBackDelivery h = std::move(*it);
  ch.held_back.erase(it);
  if (ch.held_back.empty()) --channels_with_held_back_;
  Delivery d = std::move(h.delivery);
  d.held_back = false;
  BufferedParts parts = split_buffered(h.frames, true);
  d.body = retry::RetainedBody::make(budget_, parts.body.size());
  if (d.body) d.body->bytes = std::move(parts.body);
  take_over(ch, std::move(d));
  return true;
}

std::deque<ChannelState::HeldBackDelivery> DeliveryRouter::take_held_back(ChannelState& ch) {
  if (!ch.held_back.empty()) --channels_with_held_back_;
  std::deque<ChannelState::HeldBackDelivery> held_back = std::move(ch.held_back);
  ch.held_back.clear();
  return held_back;
}

}  // namespace nackguard::session
