// Frames the relay may write before the session handles them (Session::receive_input): one
// whole first delivery, alone in a read from the broker, that handling is known to forward to
// the client as its original bytes, ahead of anything else.
//
// Why: its handling (the deliver's decode, the guard's plan, the record) took about 3.6 µs
// between the read and the send on the benchmark machine, on the added latency of every
// message that travels alone (docs/performance.md, "Sent ahead"). Written first, the
// delivery leaves once its frames are checked; the handling follows before the next read.
//
// Each condition below mirrors a place where handling could do otherwise than forward the
// frames unchanged and first: a close in progress, frames queued before them, a delivery whose
// client tag would differ from the broker's (hand_out patches the tag), deliveries held back
// behind a suspect (held_back), a delivery a guard could take over (not a first delivery, or
// an observer that does not forward first deliveries), a frame the decoder or the method
// codec refuses (then the connection is closed instead). Should handling still emit anything
// else first, Outbox::ahead_missed() says so and handle_input() closes the connection (541).

#include "proxy/amqp/method_codec.hpp"
#include "proxy/amqp/properties.hpp"
#include "proxy/session/session.hpp"

namespace nackguard::session {

using amqp::ByteView;
using amqp::FrameResult;
using amqp::FrameType;
namespace mid = amqp::mid;

amqp::ByteView Session::receive_input(Side from, std::size_t n) {
  const bool fresh = io(from).in.empty();  // no partial frame kept from the last read
  receive(from, n);
  if (from != Side::broker || !fresh || n == 0) return {};
  ByteView data = io(from).in.pending();
  return data.first(lone_first_delivery(data));
}

void Session::written_ahead(Side to, std::size_t n) {
  if (n > 0) io(to).out.written_ahead(io(other(to)).in.pending().first(n));
}

std::size_t Session::lone_first_delivery(ByteView data) {
  const SideIo& broker = io(Side::broker);
  const SideIo& client = io(Side::client);
  if (phase_ != Phase::open || proxy_close_ != ProxyClose::none || tx_replay_pending_ ||
      broker.input_closed || !client.out.empty() || client.out.closed() ||
      !client.injections.empty() || router_.any_held_back() || router_.has_deferred() ||
      !observer_->forwards_first_deliveries()) {
    return 0;
  }
  FrameResult method = broker.decoder.decode(data);
  if (method.status != FrameResult::Status::frame ||
      method.frame.frame_type() != FrameType::method || method.frame.channel == 0 ||
      method.frame.channel == reserved_channel() ||
      amqp::peek_method_key(method.frame.payload) != mid::basic_deliver) {
    return 0;
  }
  // The frames first, cheaply: under load a read holds many, and is no lone delivery.
  const std::uint16_t number = method.frame.channel;
  std::size_t at = method.frame.raw.size();
  FrameResult header = broker.decoder.decode(data.subspan(at));
  if (header.status != FrameResult::Status::frame ||
      header.frame.frame_type() != FrameType::header || header.frame.channel != number ||
      amqp::peek_has_headers(header.frame.payload)) {
    return 0;
  }
  std::optional<std::uint64_t> body_size = amqp::peek_body_size(header.frame.payload);
  if (!body_size) return 0;
  at += header.frame.raw.size();
  std::uint64_t remaining = *body_size;
  while (remaining > 0) {
    FrameResult body = broker.decoder.decode(data.subspan(at));
    if (body.status != FrameResult::Status::frame || body.frame.frame_type() != FrameType::body ||
        body.frame.channel != number || body.frame.payload.size() > remaining) {
      return 0;
    }
    remaining -= body.frame.payload.size();
    at += body.frame.raw.size();
  }
  if (at != data.size()) return 0;
  auto it = channels_.find(number);
  if (it == channels_.end()) return 0;
  const ChannelState& ch = it->second;
  if (ch.ack_close.active || ch.closing || ch.held_close.held() || ch.incoming ||
      ch.from_broker.in_progress() || ch.gate.closed() || !ch.held_back.empty()) {
    return 0;
  }
  // Decoded as start_broker_delivery decodes it, into the same scratch: it decodes it again.
  // hand_out patches the tag unless the client's next tag is the broker's own.
  amqp::BasicDeliver& m = deliver_scratch_;
  if (amqp::decode_method(method.frame.payload, m) != amqp::MethodError::none || m.redelivered ||
      m.delivery_tag != ch.last_client_tag() + 1) {
    return 0;
  }
  return at;
}

}  // namespace nackguard::session
