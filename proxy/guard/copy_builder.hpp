#pragma once
// The copy of a delivery the guard took over: what it carries (the message with nackguard's
// headers: the count, the copy's id, the reason of a dead-letter) and where it goes (a delay
// queue, the dead-letter queue or exchange, the message's own queue), as a PublishRequest for
// the proxy's channel. Pure: the guard gives the connection's facts and the moment (CopyFacts).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "proxy/guard/raw_properties.hpp"
#include "proxy/guard/seam.hpp"
#include "proxy/retry/decision.hpp"
#include "proxy/retry/fallback.hpp"
#include "proxy/retry/policy_set.hpp"
#include "proxy/retry/queue_facts.hpp"
#include "proxy/retry/tracker.hpp"

namespace nackguard::guard {

// What the guard will do with a delivery it owns, from its decision until its copy is built
// (the copy's Ticket then carries what the settlement needs).
struct CopyIntent {
  retry::Decision decision;
  std::shared_ptr<const retry::PolicySet> policies;  // keeps `policy` alive across reloads
  const retry::Policy* policy = nullptr;
  retry::TrackerKey key;
  std::string identity;
  std::string queue;
  std::int64_t first_return_ms = 0;
  std::int64_t last_return_ms = 0;
  SettleKind fallback = SettleKind::nack;  // how to give it back if the copy fails
  // The delivery's content header as the decision decoded it, until build_copy takes it.
  std::optional<RawProperties> props;
};

// What a copy needs besides its intent and delivery: the connection's facts, the queue's, and
// the job, the copy id and the times the guard chose for it.
struct CopyFacts {
  std::uint32_t frame_max = 0;   // the connection's, 0 if unknown
  std::string_view client_name;  // for x-nackguard-consumer
  std::string_view host_name;    // the proxy's host (the pod), for x-nackguard-consumer
  int broker_major = 0;          // RabbitMQ's major version, 0 if unknown
  retry::QueueFacts queue;       // what is known of the source queue (its type)
  std::uint64_t job = 0;         // the proxy channel's job for the copy
  std::uint64_t copy_id = 0;     // x-nackguard-copy-id: never 0
  std::int64_t wall_now = 0;     // for the header timestamps
  std::int64_t deadline_ms = 0;  // no confirm by then (steady clock): the copy failed
};

// The copy `intent` asks for, taking `intent.props` if the decision decoded the header; false
// if it cannot be built (`cause` and `detail` then say why: malformed_properties). The
// request's ticket gets the job; the caller fills in the rest.
bool build_copy(const CopyFacts& facts, const Delivery& delivery, CopyIntent& intent,
                PublishRequest& request, retry::FallbackCause& cause, const char*& detail);

// The delay queue for `queue` and a TTL: nackguard.delay.<queue>.<ttl>ms, with the queue's
// name shortened (and a hash appended) when the result would pass 255 bytes.
std::string delay_queue_name(std::string_view queue, retry::Millis ttl);

// The declarations of a DLQ and of a delay queue of the given type. A quorum delay queue
// dead-letters its expired copies back at-least-once, so none is dropped on the way.
// The DLQ nackguard declares when it is missing: of the source's type; a quorum one on
// RabbitMQ 4.x (`broker_major`, 0 if unknown) without a delivery limit.
QueueSpec dead_letter_queue_spec(std::string name, retry::QueueType type, int broker_major);
QueueSpec delay_queue_spec(std::string_view queue, retry::Millis ttl, retry::QueueType type);

// The major version in a broker's "version" property: 4 for "4.0.5", 0 if it has none.
int major_version(std::string_view version);

}  // namespace nackguard::guard
