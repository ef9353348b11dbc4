#pragma once
// Who a dead-letter failed at: x-nackguard-consumer, built from the client's own properties
// (connection.start-ok) and the proxy's host name (the pod name in Kubernetes).

#include <cstddef>
#include <string>
#include <string_view>

#include "proxy/amqp/table.hpp"

namespace nackguard::session {

inline constexpr std::size_t kMaxConsumerLabel = 255;  // bytes, the whole header value

// The client's name: its `connection_name` client property when it set one, else its
// `product` and `version` ("pika 1.3.2"); empty when it sent none of them. At most
// kMaxConsumerLabel bytes, cut on a UTF-8 character boundary.
std::string client_name(const amqp::FieldTable& client_properties);

// "<client> on <host>" ("unknown client" when `client` is empty; no " on ..." when `host` is
// empty). At most kMaxConsumerLabel bytes: the client's part is cut, on a UTF-8 character
// boundary, to leave room for the host's.
std::string consumer_label(std::string_view client, std::string_view host);

// `text` cut to at most `max` bytes without splitting a UTF-8 character.
std::string_view cut_utf8(std::string_view text, std::size_t max);

}  // namespace nackguard::session
