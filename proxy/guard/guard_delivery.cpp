// The guard's plan for each delivery: forwarded (and whether it is a suspect), taken over
// before the client sees it (a decision a crash left pending, or one more return would pass
// the broker's limit), or waiting for its body (an identity that needs it); which deliveries
// keep their body; and the policy's ack_timeout.

#include "proxy/amqp/properties.hpp"
#include "proxy/guard/guard.hpp"
#include "proxy/guard/guard_internal.hpp"
#include "proxy/guard/identity.hpp"

namespace nackguard::guard {

using namespace guard_internal;

DeliveryPlan Guard::on_delivery(const Delivery& d) {
  if (d.queue.empty() || d.no_ack) return DeliveryPlan{.cookie = d.cookie};
  if (d.unseen) return plan_unseen(d, policy_for(d.queue));
  const retry::Policy& policy = policy_for(d.queue);
  const std::int64_t now = context_.steady_ms();
  DeliveryReading reading;
  DeliveryPlan plan = plan_delivery(d, policy, now, reading);
  // Counted once the message is known: a message delivered before counts once in the window.
  if (!(d.cookie & kHealthCounted) && plan.action != DeliveryPlan::Action::need_body) {
    plan.cookie |= kHealthCounted;
    const retry::HealthChange health =
        context_.health().on_delivery(d.queue, policy.rate, now, reading.seen);
    report_health(context_.listener(), d.queue, policy.rate, health);
    if (reading.first && !first_delivery_keeps_body(d, policy, health)) {
      plan.retain_body = false;
      plan.cookie |= kBodySkipped;
      plan.hash_body = body_hash_needed(d, policy, reading.props);
    }
  }
  return plan;
}

DeliveryPlan Guard::plan_delivery(const Delivery& d, const retry::Policy& policy, std::int64_t now,
                                  DeliveryReading& reading) {
  DeliveryPlan plan;
  plan.cookie = d.cookie;
  if (!(d.cookie & kCounted)) {
    plan.cookie |= kCounted;
    context_.listener().on_delivery(d.queue);
    if (context_.learnt_limits().enabled()) limits_.ask(d.queue);
  }
  // Any return may have to be republished (a delay, an outage, a dead-letter), and the body
  // passes only once: keep it while the delivery is unacked, within retained_body_bytes. A
  // first delivery may keep none after all (on_delivery, first_delivery_keeps_body).
  plan.retain_body = true;

  // Most first deliveries carry no headers table: then no count, and nothing to decode.
  if (!d.redelivered && !amqp::peek_has_headers(d.header_payload)) {
    reading.first = true;
    return plan;
  }
  RawProperties& props = decoded_scratch_;
  if (!decode_delivery_header(d, props)) return plan;
  reading.props = &props;
  const amqp::BasicProperties& properties = props.header.properties;
  retry::CarriedCount carried = carried_count(properties, d);
  // An exact copy was made from a quorum queue, by whichever sidecar knew its type.
  if (carried.from_quorum_queue || !carried.flag_counts) limits_.learn_quorum(d.queue);
  // A copy nackguard delayed during an outage carries x-nackguard-returns 0: it is a message
  // seen before, which outage detection must not count as new at each pass.
  const bool copy = properties.headers && properties.headers->find(kReturnsHeader);
  if (!d.redelivered && !copy && carried.nackguard == 0 && carried.broker == 0) {
    reading.first = true;
    return plan;
  }
  plan.cookie |= kMaybeTracked;
  std::optional<std::string> identity = message_identity(policy.identity, properties, d);
  if (!identity) {
    if (!d.body_complete && identity_needs_body(policy.identity, properties)) {
      plan.action = DeliveryPlan::Action::need_body;
    }
    return plan;
  }
  retry::TrackerKey key = retry::make_key(d.queue, *identity);
  reading.seen = message_hash(key);
  std::optional<retry::TrackerEntry> entry = context_.tracker().find(key, now);
  retry::Circumstances circumstances = this->circumstances(d, policy);
  circumstances.body_kept = true;  // a delivery taken over here keeps its body (the router)
  const retry::Outcome outcome =
      retry::decide_delivery(policy, entry ? &*entry : nullptr, carried, circumstances);
  if (outcome.decision.action == retry::Action::forward) {
    plan.suspect = outcome.suspect;
    // A retry: the client sees it as the broker would have redelivered it without the proxy.
    plan.show_redelivered = carried.copy;
    return plan;
  }
  take_over_at_delivery(d, policy, now, key, *identity, entry, outcome.decision, reading);
  plan.action = DeliveryPlan::Action::take_over;
  return plan;
}

void Guard::take_over_at_delivery(const Delivery& d, const retry::Policy& policy, std::int64_t now,
                                  const retry::TrackerKey& key, const std::string& identity,
                                  const std::optional<retry::TrackerEntry>& entry,
                                  const retry::Decision& decision, DeliveryReading& reading) {
  // A crash left this decision pending: carry it out instead of handing the message out.
  if (entry && entry->pending_action != retry::Action::forward) {
    context_.tracker().upsert(key, now, retry::clear_pending);
  }
  CopyIntent intent;
  intent.decision = decision;
  intent.policies = policies_;
  intent.policy = &policy;
  intent.key = key;
  intent.identity = identity;
  intent.queue = d.queue;
  intent.first_return_ms = entry ? entry->first_return_ms : 0;
  intent.last_return_ms = entry ? entry->last_return_ms : 0;
  intent.fallback = SettleKind::nack;
  intent.props = std::move(*reading.props);
  reading.props = nullptr;
  awaiting_body_[{d.channel, d.broker_tag}] = std::move(intent);
}

DeliveryPlan Guard::plan_unseen(const Delivery& d, const retry::Policy& policy) {
  DeliveryPlan plan;
  plan.cookie = d.cookie;
  plan.retain_body = true;
  Identified id;
  id.policy = &policy;
  if (!decode_delivery_header(d, id.props)) return plan;
  id.identity = message_identity(policy.identity, id.props.header.properties, d);
  if (!id.identity) {
    if (!d.body_complete && identity_needs_body(policy.identity, id.props.header.properties)) {
      plan.action = DeliveryPlan::Action::need_body;
    }
    return plan;
  }
  // Its channel's crash holds the broker side open (session_core_end.cpp): a copy can be made.
  if (uncounted_return(d, id, ReturnContext{false, true}) == ReturnAction::take_over) {
    plan.action = DeliveryPlan::Action::take_over;
  }
  return plan;
}

bool Guard::decide_before_holding_back(const Delivery& d) {
  if (d.queue.empty() || d.no_ack || !d.redelivered) return false;
  RawProperties props;
  if (!decode_delivery_header(d, props)) return false;
  // One more return would pass the broker's limit, and a copy can be published to prevent it.
  return facts_.reserved_channel.has_value() &&
         limits_.next_return_passes(policy_for(d.queue), d.queue,
                                    carried_count(props.header.properties, d).broker);
}

// ---- which deliveries keep their body ----
// The body passes once; a return that becomes a copy (a delay, a dead-letter, a republish into
// the queue) needs it, a return forwarded as the consumer sent it does not. Every delivery that
// may have been delivered before keeps it (plan_delivery); a first delivery keeps it only when
// its first return may need it.
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
  return limits_.first_return_passes(policy, d.queue);
}

// ---- the policy's ack_timeout ----
// How long a consumer may hold a delivery unacked before the session closes its channel
// (ack_closes.cpp), and the report of each such close.

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

}  // namespace nackguard::guard
