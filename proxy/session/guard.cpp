#include "proxy/session/guard.hpp"

#include <xxhash.h>

#include <cstdio>

#include "proxy/session/identity.hpp"
#include "proxy/session/raw_properties.hpp"

namespace nackguard::session {

namespace {

// Bits of Delivery::cookie.
constexpr std::uint64_t kCounted = 1;       // counted in the queue's health already
constexpr std::uint64_t kMaybeTracked = 2;  // redelivered or a copy: the tracker may know it

// Whether a content header's property flags announce a headers table (bit 13).
bool has_headers_table(const amqp::Bytes& header_payload) {
  constexpr std::size_t kFlagsOffset = 12;  // class, weight, body size
  if (header_payload.size() < kFlagsOffset + 2) return false;
  return (header_payload[kFlagsOffset] & 0x20) != 0;
}
// After a copy failed, how long its queue's messages go to the consumer unchanged. The proxy
// channel retries a refused declaration after the same time.
constexpr std::int64_t kCopiesFailingMs = 30000;

std::uint64_t to_seconds(std::int64_t ms) {
  return ms < 0 ? 0 : static_cast<std::uint64_t>(ms / 1000);
}

// The properties of a delivery. A headers table the codec refuses (nested 10,000 deep, say)
// does not hide the message: its other properties and top-level headers still identify it.
bool decode_delivery_header(const Delivery& d, amqp::ContentHeader& out) {
  RawProperties props;
  if (!decode_properties(d.header_payload, props)) return false;
  out = std::move(props.header);
  return true;
}

}  // namespace

std::string delay_queue_name(std::string_view queue, retry::Millis ttl) {
  constexpr std::size_t kMaxQueueName = 255;
  constexpr std::size_t kKeptPrefix = 200;
  std::string suffix = "." + std::to_string(ttl.count()) + "ms";
  std::string name = "nackguard.delay.";
  if (name.size() + queue.size() + suffix.size() <= kMaxQueueName) {
    return name.append(queue).append(suffix);
  }
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx",
                static_cast<unsigned long long>(XXH3_64bits(queue.data(), queue.size())));
  return name.append(queue.substr(0, kKeptPrefix)).append("~").append(hash).append(suffix);
}

Guard::Guard(GuardContext& context, std::uint64_t seed)
    : context_(context),
      rng_(seed),
      proxy_([this](amqp::Bytes frames) { session_->inject(Side::broker, std::move(frames)); },
             [this](std::uint64_t job, bool ok, const std::string& why) {
               finish_job(job, ok, why);
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

void Guard::on_open(const std::string&) {
  proxy_.configure(session_->reserved_channel(), session_->frame_max());
}

void Guard::on_tick() {
  proxy_.on_tick(context_.now_ms());
}

void Guard::on_connection_end() {
  // The copies still in flight die with the connection, and the deliveries they were for go
  // back to the broker with it. That is no sign that copies for their queues fail: with the
  // jobs forgotten first, fail_all marks no queue (a consumer killed mid-copy would otherwise
  // stop every connection's copies for that queue for kCopiesFailingMs) and counts no fallback.
  intents_.clear();
  jobs_.clear();
  proxy_.fail_all("the connection closed");
}

void Guard::on_proxy_channel_frame(const amqp::Frame& frame) {
  proxy_.on_frame(frame, context_.now_ms());
}

bool Guard::identify(const Delivery& d, Identified& out) {
  if (d.queue.empty() || d.no_ack) return false;
  out.policy = &policy_for(d.queue);
  if (!decode_delivery_header(d, out.header)) return false;
  out.identity = message_identity(out.policy->identity, out.header.properties, d);
  return true;
}

DeliveryPlan Guard::on_delivery(const Delivery& d) {
  DeliveryPlan plan;
  plan.cookie = d.cookie;
  if (d.queue.empty() || d.no_ack) return plan;
  const retry::Policy& policy = policy_for(d.queue);
  std::int64_t now = context_.now_ms();
  if (!(d.cookie & kCounted)) {
    plan.cookie |= kCounted;
    context_.listener().on_delivery(d.queue);
    retry::HealthChange change = context_.health().on_delivery(d.queue, policy.rate, now);
    if (change.changed) context_.listener().on_outage(d.queue, change.outage, change.ratio);
  }
  // Any return may have to be republished (a delay, an outage, a dead-letter), and the body
  // passes only once: keep it while the delivery is unacked, within retained_body_bytes.
  plan.retain_body = true;

  // Most first deliveries carry no headers table: then no count, and nothing to decode.
  if (!d.redelivered && !has_headers_table(d.header_payload)) return plan;
  amqp::ContentHeader header;
  if (!decode_delivery_header(d, header)) return plan;
  std::uint32_t header_count = header_return_count(header.properties);
  if (!d.redelivered && header_count == 0) return plan;
  plan.cookie |= kMaybeTracked;
  std::optional<std::string> identity = message_identity(policy.identity, header.properties, d);
  if (!identity) {
    if (!d.body_complete && identity_needs_body(policy.identity, header.properties)) {
      plan.action = DeliveryPlan::Action::need_body;
    }
    return plan;
  }
  retry::TrackerKey key = retry::make_key(d.queue, *identity);
  std::optional<retry::TrackerEntry> entry = context_.tracker().find(key, now);
  if (!entry) return plan;
  retry::Decision decision = retry::decide_delivery(policy, *entry, header_count);
  if (decision.action != retry::Action::forward && context_.copies_failing(d.queue, now)) {
    // Its copy cannot be published now: hand it to the consumer, as without the proxy.
    decision.action = retry::Action::forward;
  }
  if (decision.action == retry::Action::forward) {
    plan.exclusive = entry->crash_suspect;
    return plan;
  }
  // A crash left this decision pending: carry it out instead of handing the message out.
  context_.tracker().upsert(key, now, [](retry::TrackerEntry& e) {
    e.pending_action = 0;
    e.pending_reason = 0;
    e.pending_delay_ms = 0;
  });
  Intent intent;
  intent.decision = decision;
  intent.policies = policies_;
  intent.policy = &policy;
  intent.key = key;
  intent.identity = *identity;
  intent.queue = d.queue;
  intent.first_return_ms = entry->first_return_ms;
  intent.last_return_ms = entry->last_return_ms;
  intent.fallback = SettleKind::nack;
  intents_[{d.channel, d.broker_tag}] = std::move(intent);
  plan.action = DeliveryPlan::Action::withhold;
  return plan;
}

void Guard::on_withheld(const Delivery& d) {
  if (intents_.count({d.channel, d.broker_tag})) execute(d);
}

void Guard::on_settled(const Delivery& d, SettleKind) {
  if (!(d.cookie & kMaybeTracked)) return;
  Identified id;
  if (!identify(d, id) || !id.identity) return;
  context_.tracker().erase(retry::make_key(d.queue, *id.identity));
}

retry::Decision Guard::count_return(const Delivery& d, const Identified& id, bool crash,
                                    bool recover, Intent& intent) {
  std::int64_t now = context_.now_ms();
  const retry::Policy& policy = *id.policy;
  retry::HealthChange health;
  if (crash) {
    health = context_.health().state(d.queue, policy.rate, now);
    bool seen = false;
    for (const auto& [queue, p] : crashed_queues_) seen = seen || queue == d.queue;
    if (!seen) crashed_queues_.emplace_back(d.queue, &policy);
  } else {
    health = context_.health().on_return(d.queue, policy.rate, now);
    if (health.changed) context_.listener().on_outage(d.queue, health.outage, health.ratio);
  }
  context_.listener().on_return(d.queue);

  retry::ReturnEvent event;
  event.now_ms = now;
  event.header_count = header_return_count(id.header.properties);
  event.crash = crash;
  event.outage = health.outage;
  retry::TrackerKey key = retry::make_key(d.queue, *id.identity);
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

bool Guard::needs_copy(const Intent& intent) {
  return intent.decision.action == retry::Action::delay ||
         intent.policy->dead_letter.via == retry::DeadLetter::Via::publish;
}

ReturnAction Guard::on_client_return(const Delivery& d, ReturnCause cause) {
  Identified id;
  if (!identify(d, id) || !id.identity) return ReturnAction::forward;
  Intent intent;
  retry::Decision decision = count_return(d, id, false, false, intent);
  if (decision.action == retry::Action::forward) {
    context_.listener().on_requeue(d.queue, retry::Action::forward);
    return ReturnAction::forward;
  }
  if (needs_copy(intent)) {
    const char* cause_label = nullptr;
    const char* detail = nullptr;
    if (!d.body || d.body->bytes.size() != d.body_size) {
      cause_label = "body_not_retained";
      detail = "the body could not be kept within limits.retained_body_bytes";
    } else if (!session_->reserved_channel()) {
      cause_label = "no_channel";
      detail = "the broker's channel_max leaves no channel for the proxy";
    } else if (context_.copies_failing(d.queue, context_.now_ms())) {
      cause_label = "republish_failed";
      detail = "copies for this queue failed moments ago (see the earlier fallback line)";
    }
    if (cause_label) {
      context_.listener().on_fallback(d.queue, cause_label, detail);
      context_.listener().on_requeue(d.queue, retry::Action::forward);
      return ReturnAction::forward;
    }
  }
  intent.fallback = cause == ReturnCause::reject ? SettleKind::reject : SettleKind::nack;
  intents_[{d.channel, d.broker_tag}] = std::move(intent);
  return ReturnAction::take_over;
}

void Guard::on_taken_over(const Delivery& d) {
  execute(d);
}

void Guard::on_returned(const Delivery& d, ReturnCause cause) {
  if (d.withheld) {
    // The broker takes back a delivery the proxy owned: its copy, if confirmed later, may be
    // a duplicate; the original is not acked.
    intents_.erase({d.channel, d.broker_tag});
    return;
  }
  if (d.held) return;                             // never handed out: not the consumer's doing
  if (cause == ReturnCause::broker_lost) return;  // a broker restart is no consumer's crash
  Identified id;
  if (!identify(d, id) || !id.identity) return;
  Intent intent;
  retry::Decision decision = count_return(d, id, true, cause == ReturnCause::recover, intent);
  (void)decision;  // carried out at the next delivery (TrackerEntry::pending_*)
}

void Guard::on_returns_done() {
  std::int64_t now = context_.now_ms();
  for (const auto& [queue, policy] : crashed_queues_) {
    retry::HealthChange health = context_.health().on_return(queue, policy->rate, now);
    if (health.changed) context_.listener().on_outage(queue, health.outage, health.ratio);
  }
  crashed_queues_.clear();
}

void Guard::execute(const Delivery& d) {
  DeliveryKey dkey{d.channel, d.broker_tag};
  auto it = intents_.find(dkey);
  if (it == intents_.end()) return;
  Intent& intent = it->second;
  const retry::Policy& policy = *intent.policy;
  std::int64_t now = context_.now_ms();
  bool dead_letter = intent.decision.action == retry::Action::dead_letter;

  if (dead_letter && policy.dead_letter.via == retry::DeadLetter::Via::reject) {
    session_->settle_withheld(d.channel, d.broker_tag, SettleKind::reject, false);
    context_.tracker().erase(intent.key);
    context_.listener().on_requeue(intent.queue, retry::Action::dead_letter);
    context_.listener().on_dead_letter(intent.queue, intent.identity, intent.decision.returns,
                                       intent.decision.reason);
    intents_.erase(it);
    return;
  }
  if (!d.body || d.body->bytes.size() != d.body_size) {
    give_back(dkey, intent, "body_not_retained",
              "the body could not be kept within limits.retained_body_bytes");
    return;
  }

  PublishRequest request;
  request.job = intent.job = ++next_job_;
  request.body = d.body;
  request.deadline_ms = now + context_.settings().confirm_timeout.count();
  RawProperties props;
  if (!decode_properties(d.header_payload, props)) {
    give_back(dkey, intent, "malformed_properties",
              "the message's properties could not be decoded");
    return;
  }
  // The proxy's headers, in the order they are written.
  std::vector<HeaderEdit> edits;
  edits.push_back({kReturnsHeader, amqp::FieldValue::i64(intent.decision.returns)});
  // A return during an outage is not counted and may have no first return time yet.
  std::int64_t first_return = intent.first_return_ms != 0 ? intent.first_return_ms : now;
  std::int64_t last_return = intent.last_return_ms != 0 ? intent.last_return_ms : now;
  edits.push_back({kFirstReturnHeader, amqp::FieldValue::timestamp(to_seconds(first_return))});
  edits.push_back({kOriginalExchangeHeader, amqp::FieldValue::string(d.exchange), true});
  edits.push_back({kOriginalRoutingKeyHeader, amqp::FieldValue::string(d.routing_key), true});
  if (dead_letter) {
    edits.push_back({kReasonHeader, amqp::FieldValue::string(
                                        std::string(retry::to_string(intent.decision.reason)))});
    edits.push_back({kLastReturnHeader, amqp::FieldValue::timestamp(to_seconds(last_return))});
    edits.push_back({kQueueHeader, amqp::FieldValue::string(intent.queue)});
    request.exchange = policy.dead_letter.exchange;
    request.routing_key = policy.dead_letter.routing_key_for(intent.queue);
    if (request.exchange.empty()) request.ensure = QueueSpec{request.routing_key, true, {}, -1};
  } else {
    std::int64_t ttl = intent.decision.delay.count();
    QueueSpec spec;
    spec.name = delay_queue_name(intent.queue, intent.decision.delay);
    spec.arguments.set("x-message-ttl", amqp::FieldValue::i64(ttl));
    spec.arguments.set("x-dead-letter-exchange", amqp::FieldValue::string(""));
    spec.arguments.set("x-dead-letter-routing-key", amqp::FieldValue::string(intent.queue));
    // Unused delay queues go away; redeclaring at least once per TTL keeps one that may still
    // hold messages from expiring.
    spec.arguments.set("x-expires", amqp::FieldValue::i64(2 * ttl + 60000));
    spec.redeclare_after_ms = ttl;
    request.exchange = "";
    request.routing_key = spec.name;
    request.ensure = std::move(spec);
  }
  request.header = std::move(props.header);
  if (!props.opaque) {
    amqp::BasicProperties& properties = request.header.properties;
    if (!properties.headers) properties.headers.emplace();
    apply_edits(*properties.headers, edits);
  } else {
    // A table the codec cannot re-encode: the copy carries the original property bytes, the
    // proxy's headers edited in at the top level only.
    constexpr std::size_t kHeaderFixed = 12;  // class, weight, body size
    if (!copy_properties(d.header_payload, props, edits, request.raw_properties) ||
        (session_->frame_max() != 0 &&
         kHeaderFixed + request.raw_properties.size() + amqp::kFrameOverhead >
             session_->frame_max())) {
      give_back(dkey, intent, "malformed_properties",
                "the message's properties could not be copied into one content header frame");
      return;
    }
  }
  jobs_[request.job] = dkey;
  proxy_.publish(std::move(request), now);
}

void Guard::finish_job(std::uint64_t job, bool ok, const std::string& why) {
  auto job_it = jobs_.find(job);
  if (job_it == jobs_.end()) return;
  DeliveryKey dkey = job_it->second;
  jobs_.erase(job_it);
  auto it = intents_.find(dkey);
  if (it == intents_.end() || it->second.job != job) return;
  Intent& intent = it->second;
  if (!ok) {
    context_.mark_copies_failing(intent.queue, context_.now_ms() + kCopiesFailingMs);
    give_back(dkey, intent, "republish_failed", why);
    return;
  }
  session_->settle_withheld(dkey.first, dkey.second, SettleKind::ack, false);
  context_.listener().on_requeue(intent.queue, intent.decision.action);
  if (intent.decision.action == retry::Action::dead_letter) {
    context_.tracker().erase(intent.key);
    context_.listener().on_dead_letter(intent.queue, intent.identity, intent.decision.returns,
                                       intent.decision.reason);
  }
  intents_.erase(it);
}

void Guard::give_back(const DeliveryKey& dkey, const Intent& intent, std::string_view cause,
                      std::string_view detail) {
  session_->settle_withheld(dkey.first, dkey.second, intent.fallback, true);
  context_.listener().on_fallback(intent.queue, cause, detail);
  context_.listener().on_requeue(intent.queue, retry::Action::forward);
  intents_.erase(dkey);
}

}  // namespace nackguard::session
