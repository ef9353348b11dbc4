// The policy's ack_timeout: how long a consumer may hold a delivery unacked before the session
// closes its channel (session_timeout.cpp), and the report of each such close.

#include <optional>
#include <string>

#include "proxy/session/guard.hpp"
#include "proxy/session/identity.hpp"

namespace nackguard::session {

std::int64_t Guard::ack_timeout_ms(const Delivery& d) {
  if (d.queue.empty() || d.no_ack) return 0;
  return policy_for(d.queue).ack_timeout.count();
}

void Guard::on_ack_timeout(const Delivery& d, std::int64_t held_ms) {
  Identified id;
  std::string identity = "unknown";
  if (identify(d, id) && id.identity) identity = *id.identity;
  context_.listener().on_ack_timeout(d.queue, identity, held_ms);
}

}  // namespace nackguard::session
