#include "proxy/session/guard.hpp"

#include "proxy/session/identity.hpp"
#include "proxy/session/raw_properties.hpp"

namespace nackguard::session {

namespace {

// Bits of Delivery::cookie.
constexpr std::uint64_t kCounted = 1;        // told to the listener (on_delivery) already
constexpr std::uint64_t kMaybeTracked = 2;   // redelivered or a copy: the tracker may know it
constexpr std::uint64_t kHealthCounted = 4;  // counted as a message in the queue's health
constexpr std::uint64_t kBodySkipped = 8;    // a first delivery that kept no body (guard_body.cpp)

// Whether a content header's property flags announce a headers table (bit 13).
bool has_headers_table(const amqp::Bytes& header_payload) {
  constexpr std::size_t kFlagsOffset = 12;  // class, weight, body size
  if (header_payload.size() < kFlagsOffset + 2) return false;
  return (header_payload[kFlagsOffset] & 0x20) != 0;
}
// The properties of a delivery. A headers table the codec refuses (nested 10,000 deep, say)
// does not hide the message: its other properties and top-level headers still identify it.
// Once per delivery and event: what a takeover decoded goes with its Intent to build_copy.
bool decode_delivery_header(const Delivery& d, RawProperties& out) {
  return decode_properties(d.header_payload, out);
}

// The 64 bits of a message's tracker key that outage detection tells messages apart by.
std::uint64_t message_hash(const retry::TrackerKey& key) {
  return key.low;
}

// Tells the listener what a health event changed: an outage's start or end, and an outage
// that lasted rate.max_outage (its returns count again from now on).
void report_health(retry::GuardListener& listener, std::string_view queue,
                   const retry::RateLimits& rate, const retry::HealthChange& change) {
  if (change.changed) listener.on_outage(queue, change.outage, change.ratio);
  if (change.became_overdue) {
    listener.on_notice(queue, "in outage for " + std::to_string(change.outage_ms / 1000) +
                                  " s, rate.max_outage (" +
                                  std::to_string(rate.max_outage.count() / 1000) +
                                  " s): its returns count towards dead-lettering again until "
                                  "the outage ends");
  }
}

}  // namespace

Guard::Guard(retry::GuardContext& context, std::uint64_t seed)
    : context_(context),
      rng_(seed),
      proxy_(
          [this](amqp::Bytes frames) {
            actions_.push_back({ObserverAction::Kind::send, std::move(frames), {}});
          },
          [this](std::uint64_t job, bool ok, const std::string& why) { finish_job(job, ok, why); },
          [this](const std::string& queue, const std::string& why) {
            context_.notice_once(facts_.vhost + '\n' + queue, queue,
                                 "exists with other arguments than nackguard declares; used "
                                 "as it is (" +
                                     why + ")");
          }) {}

const retry::Policy& Guard::policy_for(const std::string& queue) {
  std::uint64_t version = context_.policies_version();
  if (version != policies_version_ || !policies_) {
    policies_ = context_.policies();
    policies_version_ = version;
    policy_cache_.clear();
  }
  auto it = policy_cache_.find(queue);
  if (it != policy_cache_.end()) return *it->second;
  const retry::Policy& policy = policies_->match(queue);
  if (policy_cache_.size() < 10000) policy_cache_.emplace(queue, &policy);
  return policy;
}

void Guard::on_open(const ConnectionFacts& facts) {
  facts_ = facts;
  proxy_.configure(facts_.reserved_channel, facts_.frame_max);
  broker_major_ = major_version(facts_.broker_version);
}

ObserverActions Guard::on_tick() {
  proxy_.on_tick(context_.steady_ms());
  return take_actions();
}

void Guard::on_connection_end() {
  // The copies still in flight die with the connection, and the deliveries they were for go
  // back to the broker with it. That is no sign that copies for their queues fail: with the
  // jobs forgotten first, fail_all marks no queue (a consumer killed mid-copy would otherwise
  // stop every connection's copies for that queue for kCopiesFailingMs) and counts no fallback.
  intents_.clear();
  jobs_.clear();
  proxy_.fail_all("the connection closed");
  actions_.clear();
}

ObserverActions Guard::on_proxy_channel_frame(const amqp::Frame& frame) {
  proxy_.on_frame(frame, context_.steady_ms());
  return take_actions();
}

bool Guard::identify(const Delivery& d, Identified& out) {
  if (d.queue.empty() || d.no_ack) return false;
  out.policy = &policy_for(d.queue);
  if (!decode_delivery_header(d, out.props)) return false;
  out.identity = message_identity(out.policy->identity, out.props.header.properties, d);
  return true;
}

DeliveryPlan Guard::on_delivery(const Delivery& d) {
  if (d.queue.empty() || d.no_ack) return DeliveryPlan{.cookie = d.cookie};
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
      plan.hash_body = body_hash_needed(d, policy, reading.props ? &*reading.props : nullptr);
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
  }
  // Any return may have to be republished (a delay, an outage, a dead-letter), and the body
  // passes only once: keep it while the delivery is unacked, within retained_body_bytes. A
  // first delivery may keep none after all (on_delivery, first_delivery_keeps_body).
  plan.retain_body = true;

  // Most first deliveries carry no headers table: then no count, and nothing to decode.
  if (!d.redelivered && !has_headers_table(d.header_payload)) {
    reading.first = true;
    return plan;
  }
  RawProperties& props = reading.props.emplace();
  if (!decode_delivery_header(d, props)) {
    reading.props.reset();
    return plan;
  }
  const amqp::BasicProperties& properties = props.header.properties;
  retry::CarriedCount carried = carried_count(properties);
  if (carried.from_quorum_queue) learn_quorum(d.queue);
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
  // One more return of this delivery, a crash included, would pass the broker's own limit:
  // it is republished before the consumer sees it, so that no return can end it.
  bool at_limit = at_broker_limit(d, policy, properties);
  if (!entry && !at_limit) return plan;
  retry::Decision decision;
  if (entry) {
    decision = retry::decide_delivery(policy, *entry, carried);
  } else {
    decision.returns = retry::count_base(nullptr, carried);
    decision.deliveries = retry::deliveries_before(nullptr, carried);
    if (decision.returns > policy.max_redeliveries) {
      decision.action = retry::Action::dead_letter;
      decision.reason = retry::DeadLetterReason::max_redeliveries;
    }
  }
  if (decision.action != retry::Action::forward && context_.copies_failing(d.queue, now)) {
    // Its copy cannot be published now: hand it to the consumer, as without the proxy.
    decision.action = retry::Action::forward;
  }
  // A republish into the queue itself needs no declaration, so copies failing for want of a
  // DLQ or delay queue do not stop it; and handing the message out would let the broker end it.
  if (at_limit && decision.action == retry::Action::forward) {
    decision.action = retry::Action::republish;
  }
  if (decision.action == retry::Action::forward) {
    plan.suspect = entry && entry->crash_suspect;
    return plan;
  }
  // A crash left this decision pending: carry it out instead of handing the message out.
  if (entry) {
    context_.tracker().upsert(key, now, [](retry::TrackerEntry& e) {
      e.pending_action = 0;
      e.pending_reason = 0;
      e.pending_delay_ms = 0;
    });
  }
  Intent intent;
  intent.decision = decision;
  intent.policies = policies_;
  intent.policy = &policy;
  intent.key = key;
  intent.identity = *identity;
  intent.queue = d.queue;
  intent.first_return_ms = entry ? entry->first_return_ms : 0;
  intent.last_return_ms = entry ? entry->last_return_ms : 0;
  intent.fallback = SettleKind::nack;
  intent.props = std::move(reading.props);
  reading.props.reset();
  intents_[{d.channel, d.broker_tag}] = std::move(intent);
  plan.action = DeliveryPlan::Action::take_over;
  return plan;
}

bool Guard::decide_before_holding_back(const Delivery& d) {
  if (d.queue.empty() || d.no_ack || !d.redelivered) return false;
  RawProperties props;
  if (!decode_delivery_header(d, props)) return false;
  return at_broker_limit(d, policy_for(d.queue), props.header.properties);
}

void Guard::on_settled(const Delivery& d, SettleKind) {
  if (!(d.cookie & kMaybeTracked)) return;
  Identified id;
  if (!identify(d, id) || !id.identity) return;
  context_.tracker().erase(retry::make_key(d.queue, *id.identity));
}

retry::Decision Guard::count_return(const Delivery& d, const Identified& id, bool crash,
                                    bool recover, Intent& intent, bool consumer_timeout) {
  const std::int64_t now = context_.steady_ms();
  const retry::Policy& policy = *id.policy;
  retry::TrackerKey key = retry::make_key(d.queue, *id.identity);
  retry::HealthChange health;
  if (crash) {
    // Counted once per queue by on_returns_done; state() changes nothing, so the outage start
    // or end it may show is still reported there.
    health = context_.health().state(d.queue, policy.rate, now);
    bool seen = false;
    for (const CrashedQueue& crashed : crashed_queues_) seen = seen || crashed.queue == d.queue;
    if (!seen) crashed_queues_.push_back({d.queue, &policy, message_hash(key)});
  } else {
    health = context_.health().on_return(d.queue, policy.rate, now, message_hash(key));
    report_health(context_.listener(), d.queue, policy.rate, health);
  }
  context_.listener().on_return(d.queue);

  retry::ReturnEvent event;
  event.wall_ms = context_.wall_ms();
  event.steady_ms = now;
  event.carried = carried_count(id.props.header.properties);
  event.crash = crash;
  event.consumer_timeout = consumer_timeout;
  event.outage = health.holds_counts();
  retry::Decision decision;
  retry::TrackerEntry after = context_.tracker().upsert(key, now, [&](retry::TrackerEntry& e) {
    decision = retry::decide_return(policy, e, event, rng_);
    if (recover) {
      // The consumer is alive and asked for everything again: the decision waits for the next
      // delivery like a crash's, but nothing is suspect.
      e.crash_suspect = false;
      if (e.pending_reason == static_cast<std::uint8_t>(retry::DeadLetterReason::crash_loop)) {
        e.pending_reason = static_cast<std::uint8_t>(retry::DeadLetterReason::max_redeliveries);
      }
    }
  });
  context_.tracker_names().record(key, d.queue, *id.identity);
  intent.decision = decision;
  intent.policies = policies_;
  intent.policy = &policy;
  intent.key = key;
  intent.identity = *id.identity;
  intent.queue = d.queue;
  intent.first_return_ms = after.first_return_ms;
  intent.last_return_ms = after.last_return_ms;
  return decision;
}

ReturnAction Guard::on_client_return(const Delivery& d, ReturnCause cause) {
  Identified id;
  if (!identify(d, id) || !id.identity) return ReturnAction::forward;
  Intent intent;
  retry::Decision decision = count_return(d, id, false, false, intent);
  std::uint32_t broker_count = carried_count(id.props.header.properties).broker;
  const bool passes = retry::next_return_passes(broker_count, broker_limit(*id.policy, d.queue));
  if (passes) {
    // Forwarded, this requeue would have the broker drop or dead-letter the message itself.
    decision = intent.decision = retry::keep_from_broker_limit(decision);
  }
  if (passes && decision.action != retry::Action::republish &&
      context_.copies_failing(d.queue, context_.steady_ms())) {
    // Its DLQ or delay queue is refused: republishing it to its own queue needs neither, and a
    // fallback to the consumer's requeue would have the broker end it.
    decision = intent.decision = {retry::Action::republish, retry::Millis(0),
                                  retry::DeadLetterReason::none, decision.returns};
  }
  if (decision.action == retry::Action::forward) {
    context_.listener().on_requeue(d.queue, retry::Action::forward);
    return ReturnAction::forward;
  }
  if (needs_copy(intent)) {
    const char* cause_label = nullptr;
    const char* detail = nullptr;
    const bool skipped = (d.cookie & kBodySkipped) != 0;
    if (skipped && decision.action != retry::Action::republish) {
      // No body by design (guard_body.cpp): the queue entered an outage, or the policy changed,
      // since the delivery. Forwarded as a healthy queue's first return is, which nothing lets
      // the broker end; the redelivery keeps its body for the next return.
      context_.listener().on_requeue(d.queue, retry::Action::forward);
      return ReturnAction::forward;
    }
    if (!d.body || d.body->bytes.size() != d.body_size) {
      cause_label = "body_not_retained";
      detail = skipped ? "the body was not kept: the queue's delivery limit of 0 was not known "
                         "at its delivery; set broker_delivery_limit: 0 in the queue's policy "
                         "to keep every body"
                       : "the body could not be kept within limits.retained_body_bytes";
    } else if (!facts_.reserved_channel) {
      cause_label = "no_channel";
      detail = "the broker's channel_max leaves no channel for the proxy";
    } else if (decision.action != retry::Action::republish &&
               context_.copies_failing(d.queue, context_.steady_ms())) {
      cause_label = "republish_failed";
      detail = "copies for this queue failed moments ago (see the earlier fallback line)";
    }
    if (cause_label) {
      // A republish was to keep the message from the broker's own limit, which this return
      // may now pass: said as a cause of its own, as give_back does.
      if (decision.action == retry::Action::republish) {
        context_.listener().on_fallback(d.queue, "at_broker_limit",
                                        std::string(cause_label) + ": " + detail);
      } else {
        context_.listener().on_fallback(d.queue, cause_label, detail);
      }
      context_.listener().on_requeue(d.queue, retry::Action::forward);
      return ReturnAction::forward;
    }
  }
  intent.fallback = cause == ReturnCause::reject ? SettleKind::reject : SettleKind::nack;
  intent.props = std::move(id.props);
  intents_[{d.channel, d.broker_tag}] = std::move(intent);
  return ReturnAction::take_over;
}

ObserverActions Guard::on_taken_over(const Delivery& d) {
  execute(d);
  return take_actions();
}

void Guard::on_takeover_dropped(const Delivery& d) {
  // A transaction rolled back before its commit: no copy was published, and the delivery is
  // the client's again. Its return stays counted: the consumer did give it back once.
  intents_.erase({d.channel, d.broker_tag});
}

void Guard::on_returned(const Delivery& d, ReturnCause cause) {
  if (d.taken_over) {
    // The broker takes back a delivery the proxy owned: its copy, if confirmed later, may be
    // a duplicate; the original is not acked.
    intents_.erase({d.channel, d.broker_tag});
    return;
  }
  if (d.held_back) return;                        // never handed out: not the consumer's doing
  if (cause == ReturnCause::broker_lost) return;  // a broker restart is no consumer's crash
  Identified id;
  if (!identify(d, id) || !id.identity) return;
  Intent intent;
  retry::Decision decision = count_return(d, id, true, cause == ReturnCause::recover, intent,
                                          cause == ReturnCause::consumer_timeout);
  (void)decision;  // carried out at the next delivery (TrackerEntry::pending_*)
}

void Guard::on_returns_done() {
  const std::int64_t now = context_.steady_ms();
  for (const CrashedQueue& crashed : crashed_queues_) {
    const retry::RateLimits& rate = crashed.policy->rate;
    report_health(context_.listener(), crashed.queue, rate,
                  context_.health().on_return(crashed.queue, rate, now, crashed.message));
  }
  crashed_queues_.clear();
}

}  // namespace nackguard::session
