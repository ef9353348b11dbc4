// The guard's core: its setup, counting returns (a client's requeue, a crash, a recover),
// deciding them, and carrying out a decision to copy: the copy is built (copy_builder.hpp) and
// published, and the original settled once the broker confirmed it, or given back. Deliveries
// are planned in guard_delivery.cpp.

#include "proxy/session/guard.hpp"

#include "proxy/session/guard_internal.hpp"
#include "proxy/session/identity.hpp"
#include "proxy/session/raw_properties.hpp"

namespace nackguard::session {

using namespace guard_internal;

namespace {
// After a copy failed, how long its queue's messages go to the consumer unchanged. The proxy
// channel retries a refused declaration after the same time.
constexpr std::int64_t kCopiesFailingMs = 30000;
}  // namespace

Guard::Guard(retry::GuardContext& context, std::uint64_t seed)
    : context_(context),
      limits_(context),
      rng_(seed),
      proxy_(
          [this](amqp::Bytes frames) {
            actions_.push_back({ObserverAction::Kind::send, std::move(frames), {}});
          },
          [this](std::uint64_t job, retry::FallbackCause failure, const std::string& why) {
            finish_job(job, failure, why);
          },
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
  limits_.on_open(facts_.vhost, broker_major_);
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

ReturnAction Guard::on_client_return(const Delivery& d, ReturnCause cause) {
  Identified id;
  if (!identify(d, id) || !id.identity) return ReturnAction::forward;
  CopyIntent intent;
  const retry::Outcome outcome =
      count_return(d, id, ReturnKind::requeue, ReturnContext{}, false, intent);
  report_fallback(d.queue, outcome);
  if (outcome.decision.action == retry::Action::forward) {
    context_.listener().on_requeue(d.queue, retry::Action::forward);
    return ReturnAction::forward;
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

ReturnAction Guard::on_returned(const Delivery& d, ReturnCause cause,
                                const ReturnContext& context) {
  if (d.taken_over) {
    // The broker takes back a delivery the proxy owned: its copy, if confirmed later, may be
    // a duplicate; the original is not acked.
    intents_.erase({d.channel, d.broker_tag});
    return ReturnAction::forward;
  }
  Identified id;
  if (!identify(d, id) || !id.identity) return ReturnAction::forward;
  if (d.held_back || cause == ReturnCause::broker_lost || cause == ReturnCause::unseen) {
    // Never in a consumer's hands, or a broker's going: not the message's doing.
    return uncounted_return(d, id, context);
  }
  const ReturnKind kind = cause == ReturnCause::recover ? ReturnKind::recover : ReturnKind::crash;
  CopyIntent intent;
  const retry::Outcome outcome =
      count_return(d, id, kind, kind == ReturnKind::recover ? ReturnContext{} : context,
                   cause == ReturnCause::consumer_timeout, intent);
  if (outcome.decision.action == retry::Action::forward || !context.can_take_over) {
    return ReturnAction::forward;  // the broker requeues it; a pending decision waits
  }
  intent.fallback = SettleKind::nack;  // a failed copy: the broker's own requeue, as at a crash
  intent.props = std::move(id.props);
  intents_[{d.channel, d.broker_tag}] = std::move(intent);
  return ReturnAction::take_over;
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

void Guard::execute(const Delivery& d) {
  DeliveryKey dkey{d.channel, d.broker_tag};
  auto it = intents_.find(dkey);
  if (it == intents_.end()) return;
  CopyIntent& intent = it->second;
  bool dead_letter = intent.decision.action == retry::Action::dead_letter;

  if (dead_letter && intent.policy->dead_letter.via == retry::DeadLetter::Via::reject) {
    // The broker's own dead-lettering: recorded once the reject went out (on_settle_written).
    intent.settling = true;
    settle(dkey, SettleKind::reject, false);
    return;
  }
  if (!d.body || d.body->bytes.size() != d.body_size) {
    give_back(dkey, intent, retry::FallbackCause::body_not_retained,
              "the body could not be kept within limits.retained_body_bytes");
    return;
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
    give_back(dkey, intent, cause, detail);
    return;
  }
  jobs_[request.job] = dkey;
  proxy_.publish(std::move(request), context_.steady_ms());
}

void Guard::finish_job(std::uint64_t job, retry::FallbackCause failure, const std::string& why) {
  auto job_it = jobs_.find(job);
  if (job_it == jobs_.end()) return;
  DeliveryKey dkey = job_it->second;
  jobs_.erase(job_it);
  auto it = intents_.find(dkey);
  if (it == intents_.end() || it->second.job != job) return;
  CopyIntent& intent = it->second;
  if (failure != retry::FallbackCause::none) {
    // An encode failure sent nothing of the copy, and the broker is not failing: no pause.
    if (failure == retry::FallbackCause::republish_failed) {
      context_.mark_copies_failing(intent.queue, context_.steady_ms() + kCopiesFailingMs);
    }
    give_back(dkey, intent, failure, why);
    return;
  }
  // The copy is the broker's: the original is acked, and the outcome recorded once the ack
  // went out (on_settle_written).
  intent.settling = true;
  settle(dkey, SettleKind::ack, false);
}

void Guard::settle(const DeliveryKey& key, SettleKind kind, bool requeue) {
  actions_.push_back({ObserverAction::Kind::settle, {}, {key.first, key.second, kind, requeue}});
}

void Guard::on_settle_written(const Settle& s, bool written) {
  auto it = intents_.find({s.channel, s.broker_tag});
  if (it == intents_.end() || !it->second.settling) return;  // a give_back's: recorded there
  const CopyIntent& intent = it->second;
  // Not written (the connection is closing, or the broker closed the channel while the
  // settlement waited for a client's content to end): the broker delivers the original again,
  // so it was not dead-lettered, a copy confirmed is a duplicate, and the count stays.
  if (written) {
    context_.listener().on_requeue(intent.queue, intent.decision.action);
    if (intent.decision.action == retry::Action::dead_letter) {
      context_.tracker().erase(intent.key);
      context_.listener().on_dead_letter(intent.queue, intent.identity, intent.decision.returns,
                                         intent.decision.reason);
    }
  }
  intents_.erase(it);
}

void Guard::give_back(const DeliveryKey& dkey, const CopyIntent& intent, retry::FallbackCause cause,
                      std::string_view detail) {
  settle(dkey, intent.fallback, true);
  // A republish was to keep the message from the broker's own limit, which this return may
  // now pass: said as a cause of its own.
  const bool at_limit = intent.decision.action == retry::Action::republish;
  context_.listener().on_fallback(intent.queue, {cause, at_limit}, detail);
  context_.listener().on_requeue(intent.queue, retry::Action::forward);
  intents_.erase(dkey);
}

}  // namespace nackguard::session
