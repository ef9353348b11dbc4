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
#include "proxy/session/send_ahead.hpp"
#include "proxy/session/session.hpp"

namespace nackguard::session {

using amqp::ByteView;

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
  std::optional<LoneDelivery> lone = lone_delivery(broker.decoder, data, reserved_channel());
  if (!lone) return 0;
  const std::uint16_t number = lone->method.channel;
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
  if (amqp::decode_method(lone->method.payload, m) != amqp::MethodError::none || m.redelivered ||
      m.delivery_tag != ch.last_client_tag() + 1) {
    return 0;
  }
  return lone->size;
}

}  // namespace nackguard::session
