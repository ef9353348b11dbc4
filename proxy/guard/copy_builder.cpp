// What a copy of a taken-over delivery carries, and where it goes: a delayed copy, a
// dead-letter or a republish into the message's own queue, with nackguard's headers and the
// declarations of the queues it needs. Pure functions of the intent, the delivery and the
// facts the guard gives them (copy_builder.hpp).

#include "proxy/guard/copy_builder.hpp"

#include <charconv>

#include "proxy/guard/identity.hpp"
#include "proxy/retry/names.hpp"
#include "proxy/session/consumer_label.hpp"

namespace nackguard::guard {

namespace {

std::uint64_t to_seconds(std::int64_t ms) {
  return ms < 0 ? 0 : static_cast<std::uint64_t>(ms / 1000);
}

void set_quorum(amqp::FieldTable& arguments) {
  arguments.set("x-queue-type", amqp::FieldValue::string("quorum"));
}

void build_dead_letter(const CopyFacts& facts, const CopyIntent& intent,
                       std::vector<HeaderEdit>& edits, PublishRequest& request,
                       retry::QueueType type, std::int64_t last_return_ms) {
  const retry::Policy& policy = *intent.policy;
  edits.push_back({kReasonHeader, amqp::FieldValue::string(
                                      std::string(retry::to_string(intent.decision.reason)))});
  edits.push_back({kLastReturnHeader, amqp::FieldValue::timestamp(to_seconds(last_return_ms))});
  edits.push_back({kQueueHeader, amqp::FieldValue::string(intent.queue)});
  edits.push_back({kConsumerHeader, amqp::FieldValue::string(session::consumer_label(
                                        facts.client_name, facts.host_name))});
  request.exchange = policy.dead_letter.exchange;
  request.routing_key = retry::dead_letter_routing_key(policy.dead_letter, intent.queue);
  if (request.exchange.empty()) {
    request.ensure = dead_letter_queue_spec(request.routing_key, type, facts.broker_major);
  }
}

void build_delayed(const CopyIntent& intent, PublishRequest& request, retry::QueueType type) {
  request.ensure = delay_queue_spec(intent.queue, intent.decision.delay, type);
  request.exchange = "";
  request.routing_key = request.ensure->name;
}

bool build_copy_header(const CopyFacts& facts, const Delivery& d, RawProperties& props,
                       const std::vector<HeaderEdit>& edits, PublishRequest& request,
                       retry::FallbackCause& cause, const char*& detail) {
  request.header = std::move(props.header);
  if (!props.opaque) {
    amqp::BasicProperties& properties = request.header.properties;
    if (!properties.headers) properties.headers.emplace();
    apply_edits(*properties.headers, edits);
    return true;
  }
  // A table the codec cannot re-encode: the copy carries the original property bytes, the
  // proxy's headers edited in at the top level only.
  constexpr std::size_t kHeaderFixed = 12;  // class, weight, body size
  if (!copy_properties(d.header_payload, props, edits, request.raw_properties) ||
      (facts.frame_max != 0 &&
       kHeaderFixed + request.raw_properties.size() + amqp::kFrameOverhead > facts.frame_max)) {
    cause = retry::FallbackCause::malformed_properties;
    detail = "the message's properties could not be copied into one content header frame";
    return false;
  }
  return true;
}

}  // namespace

std::string delay_queue_name(std::string_view queue, retry::Millis ttl) {
  std::string suffix = "." + std::to_string(ttl.count()) + "ms";
  std::string name = "nackguard.delay.";
  name.append(queue).append(suffix);
  return retry::fit_name(name, suffix.size());
}

QueueSpec dead_letter_queue_spec(std::string name, retry::QueueType type, int broker_major) {
  QueueSpec spec;
  spec.name = std::move(name);
  spec.use_existing = true;  // an operator's own DLQ is used as it is
  if (type == retry::QueueType::quorum) {
    set_quorum(spec.arguments);
    // RabbitMQ 4.x gives a quorum queue a delivery limit of 20 by default, and drops a
    // message returned more often when the queue has no dead-letter exchange, as a DLQ
    // has not: every look at a message that `nackguard replay` leaves in place (a dry run,
    // --where) is such a return. -1 turns the limit off; 3.x has no default limit, and
    // would read -1 as a limit below every count.
    if (broker_major >= 4) spec.arguments.set("x-delivery-limit", amqp::FieldValue::i64(-1));
  }
  return spec;
}

QueueSpec delay_queue_spec(std::string_view queue, retry::Millis ttl, retry::QueueType type) {
  QueueSpec spec;
  spec.name = delay_queue_name(queue, ttl);
  amqp::FieldTable& arguments = spec.arguments;
  if (type == retry::QueueType::quorum) set_quorum(arguments);
  arguments.set("x-message-ttl", amqp::FieldValue::i64(ttl.count()));
  arguments.set("x-dead-letter-exchange", amqp::FieldValue::string(""));
  arguments.set("x-dead-letter-routing-key", amqp::FieldValue::string(std::string(queue)));
  if (type == retry::QueueType::quorum) {
    // At-most-once (the default) would drop a copy whose move back to the source failed.
    arguments.set("x-dead-letter-strategy", amqp::FieldValue::string("at-least-once"));
    arguments.set("x-overflow", amqp::FieldValue::string("reject-publish"));
  }
  // Unused classic delay queues go away; redeclaring at least once per TTL keeps one that may
  // still hold messages from expiring. A quorum queue's x-expires counts from its declaration
  // whatever is declared or published since (3.10.8, 4.0.5 and 4.3.6): it would delete the
  // queue, and the copies waiting in it, 2 TTLs and a minute after it was made.
  if (type != retry::QueueType::quorum) {
    arguments.set("x-expires", amqp::FieldValue::i64(2 * ttl.count() + 60000));
  }
  spec.redeclare_after_ms = ttl.count();
  return spec;
}

int major_version(std::string_view version) {
  int major = 0;
  auto [end, error] = std::from_chars(version.data(), version.data() + version.size(), major);
  (void)end;
  return error == std::errc() && major > 0 ? major : 0;
}

bool build_copy(const CopyFacts& facts, const Delivery& d, CopyIntent& intent,
                PublishRequest& request, retry::FallbackCause& cause, const char*& detail) {
  const retry::Policy& policy = *intent.policy;
  request.ticket.job = facts.job;
  request.body = d.body;
  request.deadline_ms = facts.deadline_ms;
  const std::int64_t now = facts.wall_now;  // for the header timestamps
  // Decoded once: by the decision that took the delivery over (intent.props).
  RawProperties props;
  if (intent.props) {
    props = std::move(*intent.props);
    intent.props.reset();
  } else if (!decode_properties(d.header_payload, props)) {
    cause = retry::FallbackCause::malformed_properties;
    detail = "the message's properties could not be decoded";
    return false;
  }
  // The proxy's headers, in the order they are written. The broker's x-delivery-count and
  // x-acquired-count count deliveries of the original; on a copy they would be stale (RabbitMQ
  // sets them only from a message's first redelivery on), and would read as counts the copy
  // does not have.
  std::vector<HeaderEdit> edits;
  edits.push_back({kDeliveryCountHeader, amqp::FieldValue::none(), false, true});
  edits.push_back({kAcquiredCountHeader, amqp::FieldValue::none(), false, true});
  edits.push_back({kReturnsHeader, amqp::FieldValue::i64(intent.decision.returns)});
  // The count travels with the copy, for the queue it was counted in; a tracker entry made for
  // another copy is stale for this one.
  edits.push_back({kReturnsQueueHeader, amqp::FieldValue::string(intent.queue)});
  edits.push_back({kCopyIdHeader, amqp::FieldValue::i64(static_cast<std::int64_t>(facts.copy_id))});
  const bool suspect =
      intent.decision.suspect && intent.decision.action != retry::Action::dead_letter;
  if (suspect) {
    edits.push_back({kSuspectHeader, amqp::FieldValue::boolean(true)});
  } else {
    edits.push_back({kSuspectHeader, amqp::FieldValue::none(), false, true});
  }
  edits.push_back({kDeliveriesHeader, amqp::FieldValue::i64(intent.decision.deliveries)});
  // A return during an outage is not counted and may have no first return time yet.
  std::int64_t first_return = intent.first_return_ms != 0 ? intent.first_return_ms : now;
  std::int64_t last_return = intent.last_return_ms != 0 ? intent.last_return_ms : now;
  edits.push_back({kFirstReturnHeader, amqp::FieldValue::timestamp(to_seconds(first_return))});
  edits.push_back({kOriginalExchangeHeader, amqp::FieldValue::string(d.exchange), true});
  edits.push_back({kOriginalRoutingKeyHeader, amqp::FieldValue::string(d.routing_key), true});
  if (intent.decision.action == retry::Action::dead_letter) {
    // In its DLQ the count is history (x-nackguard-returns-queue): nothing to be exact about.
    edits.push_back({kExactHeader, amqp::FieldValue::none(), false, true});
  } else if (facts.queue.type == retry::QueueFacts::Type::quorum) {
    // Back in a quorum queue, which may redeliver it with no consumer's return (one that
    // crossed a basic.cancel): its count is written here at every return, the flag counts
    // nothing. A copy of an exact copy stays exact whatever this proxy knows: the header is
    // kept.
    edits.push_back({kExactHeader, amqp::FieldValue::boolean(true)});
  }
  retry::QueueType type = retry::declared_queue_type(policy.queue_type, facts.queue);
  switch (intent.decision.action) {
    case retry::Action::dead_letter:
      build_dead_letter(facts, intent, edits, request, type, last_return);
      break;
    case retry::Action::republish:
      // Back to the tail of its own queue, which exists: it was just delivered from it.
      request.exchange = "";
      request.routing_key = intent.queue;
      break;
    case retry::Action::delay:
    case retry::Action::forward:
      build_delayed(intent, request, type);
      break;
  }
  return build_copy_header(facts, d, props, edits, request, cause, detail);
}

}  // namespace nackguard::guard
