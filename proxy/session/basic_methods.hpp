#pragma once
// The channel's consumers and gets, kept from the basic-class methods that start and end them:
// which queue a delivery comes from, and whether it needs no ack, is known by its consumer tag
// or by the get it answers.

#include <cstdint>

#include "proxy/amqp/frame.hpp"
#include "proxy/session/channel.hpp"

namespace nackguard::session {

enum class BasicNote {
  noted,
  malformed,     // the method does not decode: the caller closes the connection (501)
  requeues_all,  // basic.recover(-async) with requeue: everything unacked goes back
};

// basic.consume, cancel, get, recover or recover-async from the client.
BasicNote note_client_basic_method(ChannelState& ch, const amqp::Frame& frame, std::uint32_t key);

// basic.consume-ok, cancel or cancel-ok from the broker; false if it does not decode.
bool note_broker_consumer_method(ChannelState& ch, const amqp::Frame& frame, std::uint32_t key);

}  // namespace nackguard::session
