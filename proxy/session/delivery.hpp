#pragma once
// What the session knows of one delivery between basic.deliver (or get-ok) and its settlement.

#include <cstdint>
#include <string>

#include "proxy/amqp/bytes.hpp"
#include "proxy/amqp/properties.hpp"

namespace nackguard::session {

struct Delivery {
  std::uint16_t channel = 0;
  std::uint64_t broker_tag = 0;  // the tag the broker gave it
  std::uint64_t client_tag = 0;  // the tag the client saw; 0 while withheld from the client
  std::string consumer_tag;      // empty for basic.get
  std::string queue;             // empty if the consumer or get was not seen
  std::string exchange;
  std::string routing_key;
  bool redelivered = false;
  bool no_ack = false;
  bool from_get = false;
  bool withheld = false;       // the proxy kept it from the client and owns its settlement
  amqp::Bytes header_payload;  // the raw content header: properties are decoded on demand
  std::uint64_t body_size = 0;

  // Decodes the content header; false if it is malformed.
  bool decode_header(amqp::ContentHeader& out) const {
    return amqp::decode_content_header(header_payload, out) == amqp::HeaderError::none;
  }
};

// Why the broker will deliver a message again.
enum class ReturnCause { nack, reject, recover, channel_closed, connection_closed };
std::string_view to_string(ReturnCause cause);

enum class SettleKind { ack, nack, reject };

// The observer's choice for a delivery, taken when its content header has arrived.
enum class Verdict { forward, withhold };

}  // namespace nackguard::session
