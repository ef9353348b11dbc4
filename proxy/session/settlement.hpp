#pragma once
// The broker's part of a client's ack, nack or reject, when the client's delivery tags are no
// longer the broker's (the proxy took deliveries over on the channel): written under the
// broker's tags, and never naming a delivery the proxy owns. (append_settlement, for one
// settlement frame, is in delivery.hpp.)

#include <cstdint>
#include <vector>

#include "proxy/amqp/bytes.hpp"
#include "proxy/session/channel.hpp"
#include "proxy/session/delivery.hpp"

namespace nackguard::session {

// The client's settlement as it sent it; `unknown`: its tag is above any the client was given.
struct ClientSettlement {
  std::uint16_t channel = 0;
  SettleKind kind = SettleKind::ack;
  std::uint64_t tag = 0;
  bool multiple = false;
  bool requeue = false;
  bool unknown = false;
};

// Appends to `out` the frames that settle, at the broker, the deliveries `forwarded` (of those
// the client's settlement `settled` on `ch`), in one frame where a multiple one takes nothing
// of the proxy's; nothing when nothing is to be settled there.
void append_client_settlement(amqp::Bytes& out, const ChannelState& ch, const ClientSettlement& c,
                              const std::vector<Delivery>& settled,
                              const std::vector<const Delivery*>& forwarded);

}  // namespace nackguard::session
