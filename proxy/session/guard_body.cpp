// Which deliveries keep their body while unacked. The body passes once; a return that becomes
// a copy (a delay, a dead-letter, a republish into the queue) needs it, a return forwarded as
// the consumer sent it does not. Every delivery that may have been delivered before keeps it
// (plan_delivery); a first delivery keeps it only when its first return may need it.

#include "proxy/session/guard.hpp"
#include "proxy/session/identity.hpp"

namespace nackguard::session {

namespace {
// Below this, hashing the body as it passes costs less than decoding its properties to learn
// that no identity needs the hash; above it, the hash costs more than the copy it replaces
// (XXH3 against memcpy: at 64 KiB, 9.60 against 9.15 CPU-s per 100k, docs/performance-history.md).
constexpr std::uint64_t kDecideHashFrom = 4096;
}  // namespace

bool Guard::body_hash_needed(const Delivery& d, const retry::Policy& policy,
                             const RawProperties* decoded) {
  if (d.body_size < kDecideHashFrom) return true;
  // An opaque headers table (raw_properties.hpp) may hide what the identity needs: hashed.
  if (decoded)
    return decoded->opaque || identity_needs_body(policy.identity, decoded->header.properties);
  amqp::ContentHeader header;
  if (!d.decode_header(header)) return true;
  return identity_needs_body(policy.identity, header.properties);
}

bool Guard::first_delivery_keeps_body(const Delivery& d, const retry::Policy& policy,
                                      const retry::HealthChange& health) {
  // The policy itself asks for a copy at the first return: max_redeliveries 0 (dead-letter
  // by publishing), requeue: delayed, rate.per_message 0.
  if (retry::first_return_needs_copy(policy)) return true;
  // In outage, a return is delayed. Near one (more of the window's messages returned than
  // the share at which an outage ends, however few they are) an outage may start before this
  // delivery's return.
  if (health.outage || health.ratio > policy.rate.outage_ratio * retry::kLeaveFactor) return true;
  // On a quorum queue a crash return is always a copy (retry::Circumstances::quorum_queue).
  if (context_.queue_facts().is_quorum(d.queue)) return true;
  // The broker's limit leaves the first return no room: it would be republished.
  return first_return_passes_broker_limit(policy, d.queue);
}

}  // namespace nackguard::session
