#pragma once
// The frame scan of the send-ahead (Session::receive_input, session_core.cpp): whether a
// read from the broker holds exactly one whole delivery that could go to the client as it is.

#include <cstdint>
#include <optional>

#include "proxy/amqp/frame.hpp"

namespace nackguard::session {

// `data` is one whole delivery and nothing else: a basic.deliver method frame on a channel
// other than 0 and `reserved`, a content header without headers (which a guard would read),
// and the body frames of the size it announces, all on that channel. Cheap: the frames'
// headers are read, not the method's fields (the caller decodes those).
struct LoneDelivery {
  amqp::Frame method;  // the basic.deliver's frame, a view into `data`
  std::size_t size = 0;
};
std::optional<LoneDelivery> lone_delivery(const amqp::FrameDecoder& decoder, amqp::ByteView data,
                                          std::optional<std::uint16_t> reserved);

}  // namespace nackguard::session
