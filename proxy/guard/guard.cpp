// The guard's core: its setup, counting returns (a client's requeue, a crash, a recover),
// deciding them, and turning a decision to copy into a TakeOver: the copy is built
// (copy_builder.hpp) for the session to publish; its Outcome comes back, and the original is
// settled (acked once the broker confirmed the copy, or given back). Deliveries are planned in
// guard_delivery.cpp.

#include "proxy/guard/guard.hpp"

#include "proxy/guard/guard_internal.hpp"
#include "proxy/guard/identity.hpp"
#include "proxy/guard/raw_properties.hpp"

namespace nackguard::guard {

using namespace guard_internal;

namespace {
// After a copy failed, how long its queue's messages go to the consumer unchanged. The proxy
// channel retries a refused declaration after the same time.
constexpr std::int64_t kCopiesFailingMs = 30000;
}  // namespace

session::SessionOptions guarded(session::SessionOptions options, retry::GuardContext& context) {
  options.steady_ms = [&context] { return context.steady_ms(); };
  return options;
}

Guard::Guard(retry::GuardContext& context, std::uint64_t seed)
    : context_(context), limits_(context), rng_(seed) {}

void Guard::on_queue_notice(const QueueNotice& notice) {
  context_.notice_once(
      facts_.vhost + '\n' + notice.queue, notice.queue,
      "exists with other arguments than nackguard declares; used as it is (" + notice.why + ")");
}

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
  broker_major_ = major_version(facts_.broker_version);
  limits_.on_open(facts_.vhost, broker_major_);
}

void Guard::on_connection_end() {
  awaiting_body_.clear();
}

bool Guard::identify(const Delivery& d, Identified& out) {
  if (d.queue.empty() || d.no_ack) return false;
  out.policy = &policy_for(d.queue);
  if (!decode_delivery_header(d, out.props)) return false;
  out.identity = message_identity(out.policy->identity, out.props.header.properties, d);
  return true;
}

void Guard::on_settled(const Delivery& d, SettleKind) {
  if (!(d.cookie & kMaybeTracked)) return;
  Identified id;
  if (!identify(d, id) || !id.identity) return;
  context_.tracker().erase(retry::make_key(d.queue, *id.identity));
}

retry::Outcome Guard::count_return(const Delivery& d, const Identified& id, ReturnKind kind,
                                   const ReturnContext& context, bool consumer_timeout,
                                   CopyIntent& intent) {
  const std::int64_t now = context_.steady_ms();
  const retry::Policy& policy = *id.policy;
  retry::TrackerKey key = retry::make_key(d.queue, *id.identity);
  retry::HealthChange health;
  if (kind != ReturnKind::requeue) {
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
  event.carried = carried_count(id.props.header.properties, d);
  event.crash = kind != ReturnKind::requeue;
  // A recover is the consumer's own request: the message's doing as much as a requeue.
  event.solo = context.solo || kind == ReturnKind::recover;
  event.consumer_timeout = consumer_timeout;
  event.outage = health.holds_counts();
  retry::Circumstances circumstances = this->circumstances(d, policy);
  // A recover has the broker requeue everything at once: nothing can be taken over.
  circumstances.take_over_at_crash = context.can_take_over;
  retry::Outcome outcome;
  retry::TrackerEntry after = context_.tracker().upsert(key, now, [&](retry::TrackerEntry& e) {
    switch (kind) {
      case ReturnKind::requeue:
        outcome = retry::decide_requeue(policy, e, event, circumstances, rng_);
        return;
      case ReturnKind::recover:
        outcome = retry::decide_recover(policy, e, event, circumstances, rng_);
        return;
      case ReturnKind::crash:
        outcome = retry::decide_crash(policy, e, event, circumstances, rng_);
        return;
    }
  });
  context_.tracker_names().record(key, d.queue, *id.identity);
  intent.decision = outcome.decision;
  intent.policies = policies_;
  intent.policy = &policy;
  intent.key = key;
  intent.identity = *id.identity;
  intent.queue = d.queue;
  intent.first_return_ms = after.first_return_ms;
  intent.last_return_ms = after.last_return_ms;
  return outcome;
}

retry::Circumstances Guard::circumstances(const Delivery& d, const retry::Policy& policy) {
  retry::Circumstances c;
  c.broker_limit = limits_.limit(policy, d.queue).limit;
  c.body_kept = d.body && d.body->bytes.size() == d.body_size;
  c.body_skipped = (d.cookie & kBodySkipped) != 0;
  c.proxy_channel = facts_.reserved_channel.has_value();
  c.copies_failing = context_.copies_failing(d.queue, context_.steady_ms());
  c.reject_dead_letters = policy.dead_letter.via == retry::DeadLetter::Via::reject;
  c.quorum_queue = context_.queue_facts().is_quorum(d.queue);
  return c;
}

void Guard::report_fallback(const std::string& queue, const retry::Outcome& outcome) {
  using Cause = retry::FallbackCause;
  std::string_view detail;
  switch (outcome.fallback) {
    case Cause::none:
      return;
    case Cause::body_skipped:
      // No body by design (guard_delivery.cpp): the queue entered an outage, or the policy
      // changed, since the delivery. Forwarded as a healthy queue's first return is; the
      // redelivery keeps its body for the next return. Only a copy for the broker's limit is
      // a fallback: the return may now pass it.
      if (!outcome.at_broker_limit || outcome.wanted != retry::Action::republish) return;
      detail =
          "the body was not kept: the queue's delivery limit (0 or 1) was not known at its "
          "delivery; set broker_delivery_limit to it in the queue's policy to keep every body";
      break;
    case Cause::body_not_retained:
      detail = "the body could not be kept within limits.retained_body_bytes";
      break;
    case Cause::no_channel:
      detail = "the broker's channel_max leaves no channel for the proxy";
      break;
    case Cause::republish_failed:
      detail = "copies for this queue failed moments ago (see the earlier fallback line)";
      break;
    case Cause::malformed_properties:
    case Cause::encode_failed:
      return;  // found only while a copy is built (guard.cpp), reported there
  }
  // A republish was to keep the message from the broker's own limit, which this return may
  // now pass: said as a cause of its own, as give_back does.
  const bool at_limit = outcome.at_broker_limit && outcome.wanted == retry::Action::republish;
  const Cause cause =
      outcome.fallback == Cause::body_skipped ? Cause::body_not_retained : outcome.fallback;
  context_.listener().on_fallback(queue, {cause, at_limit}, detail);
}

std::optional<TakeOver> Guard::on_client_return(const Delivery& d, ReturnCause cause) {
  Identified id;
  if (!identify(d, id) || !id.identity) return std::nullopt;
  CopyIntent intent;
  const retry::Outcome outcome =
      count_return(d, id, ReturnKind::requeue, ReturnContext{}, false, intent);
  report_fallback(d.queue, outcome);
  if (outcome.decision.action == retry::Action::forward) {
    context_.listener().on_requeue(d.queue, retry::Action::forward);
    return std::nullopt;
  }
  // A transaction that rolls back drops the TakeOver: its return stays counted, as the
  // consumer did give the message back once.
  intent.fallback = cause == ReturnCause::reject ? SettleKind::reject : SettleKind::nack;
  intent.props = std::move(id.props);
  return take_over(d, intent);
}

std::optional<TakeOver> Guard::on_taken_over(const Delivery& d) {
  auto it = awaiting_body_.find({d.channel, d.broker_tag});
  if (it == awaiting_body_.end()) return std::nullopt;
  CopyIntent intent = std::move(it->second);
  awaiting_body_.erase(it);
  return take_over(d, intent);
}

ReturnDecision Guard::on_returned(const Delivery& d, ReturnCause cause,
                                  const ReturnContext& context) {
  // The broker takes back a delivery the proxy owned: its copy, if confirmed later, may be a
  // duplicate; the original is not acked (the session drops the copy's outcome).
  if (d.taken_over) return {};
  Identified id;
  if (!identify(d, id) || !id.identity) return {};
  if (d.held_back || cause == ReturnCause::broker_lost || cause == ReturnCause::unseen) {
    // Never in a consumer's hands, or a broker's going: not the message's doing.
    return {uncounted_return(d, id, context), std::nullopt};
  }
  const ReturnKind kind = cause == ReturnCause::recover ? ReturnKind::recover : ReturnKind::crash;
  CopyIntent intent;
  const retry::Outcome outcome =
      count_return(d, id, kind, kind == ReturnKind::recover ? ReturnContext{} : context,
                   cause == ReturnCause::consumer_timeout, intent);
  if (outcome.decision.action == retry::Action::forward || !context.can_take_over) {
    return {};  // the broker requeues it; a pending decision waits
  }
  intent.fallback = SettleKind::nack;  // a failed copy: the broker's own requeue, as at a crash
  intent.props = std::move(id.props);
  return {ReturnAction::take_over, take_over(d, intent)};
}

ReturnAction Guard::uncounted_return(const Delivery& d, Identified& id,
                                     const ReturnContext& context) {
  const retry::CarriedCount carried = carried_count(id.props.header.properties, d);
  const std::int64_t now = context_.steady_ms();
  const retry::TrackerKey key = retry::make_key(d.queue, *id.identity);
  if (context.can_take_over) {
    // Kept from the broker's requeue, whose redelivered flag any other sidecar would count.
    std::optional<retry::TrackerEntry> entry = context_.tracker().find(key, now);
    retry::Circumstances c = circumstances(d, *id.policy);
    c.body_kept = true;  // held back: its frames are buffered whole
    const retry::Outcome out =
        retry::decide_uncounted_return(entry ? &*entry : nullptr, carried, c);
    if (out.decision.action != retry::Action::forward) {
      DeliveryReading reading;
      reading.props = &id.props;
      take_over_at_delivery(d, *id.policy, now, key, *id.identity, entry, out.decision, reading);
      return ReturnAction::take_over;
    }
  }
  // The broker requeues it: its redelivered flag will stand for no return, here.
  context_.tracker().upsert(
      key, now, [&](retry::TrackerEntry& e) { retry::note_uncounted_return(e, carried); });
  return ReturnAction::forward;
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

TakeOver Guard::take_over(const Delivery& d, CopyIntent& intent) {
  TakeOver out;
  Ticket& ticket = out.at_once.ticket;
  ticket.channel = d.channel;
  ticket.broker_tag = d.broker_tag;
  ticket.queue = intent.queue;
  ticket.key = intent.key;
  ticket.identity = intent.identity;
  ticket.decision = intent.decision;
  ticket.fallback = intent.fallback;
  if (intent.decision.action == retry::Action::dead_letter &&
      intent.policy->dead_letter.via == retry::DeadLetter::Via::reject) {
    ticket.via_reject = true;  // the broker's own dead-lettering: no copy
    return out;
  }
  if (!d.body || d.body->bytes.size() != d.body_size) {
    out.at_once.failure = retry::FallbackCause::body_not_retained;
    out.at_once.why = "the body could not be kept within limits.retained_body_bytes";
    return out;
  }
  PublishRequest request;
  retry::FallbackCause cause = retry::FallbackCause::none;
  const char* detail = "";
  CopyFacts facts;
  facts.frame_max = facts_.frame_max;
  facts.client_name = facts_.client_name;
  facts.host_name = context_.settings().host_name;
  facts.broker_major = broker_major_;
  facts.queue = context_.queue_facts().find(intent.queue);
  facts.job = ++next_job_;
  while (facts.copy_id == 0) facts.copy_id = rng_();
  facts.wall_now = context_.wall_ms();
  facts.deadline_ms = context_.steady_ms() + context_.settings().confirm_timeout.count();
  if (!build_copy(facts, d, intent, request, cause, detail)) {
    out.at_once.failure = cause;
    out.at_once.why = detail;
    return out;
  }
  ticket.job = request.ticket.job;
  request.ticket = std::move(ticket);
  out.copy = std::move(request);
  return out;
}

Settle Guard::on_outcome(const Outcome& outcome) {
  const Ticket& t = outcome.ticket;
  retry::GuardListener& listener = context_.listener();
  if (outcome.failure != retry::FallbackCause::none) {
    // An encode failure sent nothing of the copy, and the broker is not failing: no pause.
    if (outcome.failure == retry::FallbackCause::republish_failed) {
      context_.mark_copies_failing(t.queue, context_.steady_ms() + kCopiesFailingMs);
    }
    // A republish was to keep the message from the broker's own limit, which this return may
    // now pass: said as a cause of its own.
    const bool at_limit = t.decision.action == retry::Action::republish;
    listener.on_fallback(t.queue, {outcome.failure, at_limit}, outcome.why);
    listener.on_requeue(t.queue, retry::Action::forward);
    return {t.channel, t.broker_tag, t.fallback, true};
  }
  // The copy is the broker's (or the broker dead-letters the original, `via: reject`): the
  // settlement is written as this call returns, and booked now.
  listener.on_requeue(t.queue, t.decision.action);
  if (t.decision.action == retry::Action::dead_letter) {
    context_.tracker().erase(t.key);
    listener.on_dead_letter(t.queue, t.identity, t.decision.returns, t.decision.reason);
  }
  return {t.channel, t.broker_tag, t.via_reject ? SettleKind::reject : SettleKind::ack, false};
}

}  // namespace nackguard::guard
