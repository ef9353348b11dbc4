// The broker's content frames: checked for their sequence, then a delivery's handed to the
// delivery router (delivery_router.hpp) and a basic.return's passed through. The actions the
// router collects for deliveries the proxy took over are applied here.

#include "proxy/session/session.hpp"

namespace nackguard::session {

using amqp::Frame;
using amqp::FrameType;
namespace reply = amqp::reply;

void Session::handle_broker_content(ChannelState& ch, const Frame& frame) {
  ContentState& state = ch.from_broker;
  const bool is_header = frame.frame_type() == FrameType::header;
  if (!state.take(frame)) {
    protocol_error(Side::broker, reply::unexpected_frame,
                   "UNEXPECTED_FRAME - nackguard got a content frame out of sequence on channel " +
                       std::to_string(frame.channel));
    return;
  }

  if (ch.incoming) {
    if (is_header) {
      router_.header(ch, frame);
    } else {
      router_.body(ch, frame);
    }
    if (!state.in_progress()) {
      router_.complete(ch);
      carry_out_router_take_overs();
    }
  } else {
    // basic.return content: passed through.
    emit(Side::client, frame.raw);
    ch.to_client = state;
  }
  if (!state.in_progress()) {
    if (router_.any_held_back()) {
      finish_bookkeeping();  // a release records deliveries too, in tag order
      release_all_held_back();
    }
    flush_injections(Side::client);
  }
}

void Session::release_held_back(ChannelState& ch, bool even_with_others_in_hand) {
  if (content_in_progress(Side::client)) return;  // retried at the next frame boundary
  bool force = even_with_others_in_hand;
  while (router_.release_next(ch, force)) {
    force = false;
    carry_out_router_take_overs();
  }
}

void Session::release_all_held_back() {
  for (auto& [number, ch] : channels_) {
    if (!ch.held_back.empty() && !ch.gate.closed()) release_held_back(ch);
  }
}

}  // namespace nackguard::session
