#pragma once
// The redelivery guard of one connection: it implements the session's observer, counts each
// return in the shared tracker, and per the queue's policy lets a requeue through, turns it
// into a delayed republish, or dead-letters the message. It acks an original upstream only
// after the broker confirmed its copy; whatever it cannot complete, it gives back to the
// broker as the consumer asked. It never calls the session, and keeps nothing of a delivery it
// took over: it returns a TakeOver (the copy to publish, with its Ticket), and settles from the
// Outcome the session hands back (observer.hpp, takeover.hpp).

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "proxy/guard/copy_builder.hpp"
#include "proxy/guard/limit_watch.hpp"
#include "proxy/guard/raw_properties.hpp"
#include "proxy/guard/seam.hpp"
#include "proxy/retry/guard_context.hpp"
#include "proxy/retry/outcome.hpp"
#include "proxy/session/session.hpp"

namespace nackguard::guard {

// `options` for a session observed by a guard of `context`: the proxy's channel reads the
// guard's steady clock.
session::SessionOptions guarded(session::SessionOptions options, retry::GuardContext& context);

class Guard final : public SessionObserver {
 public:
  Guard(retry::GuardContext& context, std::uint64_t seed);

  // The connection is gone: take-overs waiting for a body are forgotten (the broker requeues
  // their deliveries).
  void on_connection_end();

  void on_open(const ConnectionFacts& facts) override;
  DeliveryPlan on_delivery(const Delivery& delivery) override;
  // A first delivery carries no count to decide on: plan_delivery forwards it.
  bool forwards_first_deliveries() const override { return true; }
  bool decide_before_holding_back(const Delivery& delivery) override;
  void on_settled(const Delivery& delivery, SettleKind kind) override;
  std::optional<TakeOver> on_client_return(const Delivery& delivery, ReturnCause cause) override;
  std::optional<TakeOver> on_taken_over(const Delivery& delivery) override;
  // Books the outcome (the requeue, a dead-letter, a fallback) and returns the settlement.
  Settle on_outcome(const Outcome& outcome) override;
  void on_queue_notice(const QueueNotice& notice) override;
  ReturnDecision on_returned(const Delivery& delivery, ReturnCause cause,
                             const ReturnContext& context) override;
  void on_returns_done() override;
  void on_queue_declare(const amqp::QueueDeclare& declare) override {
    limits_.on_queue_declare(declare);
  }
  // The policy's ack_timeout.
  std::int64_t ack_timeout_ms(const Delivery& delivery) override;
  void on_ack_timeout(const Delivery& delivery, std::int64_t held_ms) override;

 private:
  using DeliveryKey = std::pair<std::uint16_t, std::uint64_t>;  // channel, broker tag

  struct Identified {
    const retry::Policy* policy = nullptr;
    RawProperties props;  // the content header, decoded
    std::optional<std::string> identity;
  };

  const retry::Policy& policy_for(const std::string& queue);
  // What the final decisions need to know besides the message (retry::Circumstances).
  retry::Circumstances circumstances(const Delivery& delivery, const retry::Policy& policy);
  // Whether a first delivery (not redelivered, no count carried) keeps its body: whether its
  // first return may need a copy, under `policy` and with the queue's `health` at its
  // delivery (guard_delivery.cpp).
  bool first_delivery_keeps_body(const Delivery& delivery, const retry::Policy& policy,
                                 const retry::HealthChange& health);
  // Whether a delivery that keeps no body must still have it hashed as it passes: whether its
  // identity under `policy` may fall back to the body (guard_delivery.cpp). `decoded`: its content
  // header, if plan_delivery decoded it already.
  static bool body_hash_needed(const Delivery& delivery, const retry::Policy& policy,
                               const RawProperties* decoded);
  bool identify(const Delivery& delivery, Identified& out);
  // What plan_delivery learnt of a delivery besides its plan.
  struct DeliveryReading {
    // The message's hash when it may have been delivered before (for the queue's health).
    std::optional<std::uint64_t> seen;
    // A first delivery: not redelivered, no count carried, not a copy of nackguard's.
    bool first = false;
    // The content header, if it was decoded and the delivery was not taken over (a CopyIntent
    // then has it): decoded_scratch_. A pointer, not the value: a RawProperties in the
    // struct had every delivery zero-fill its 600-odd bytes (session_bench, +2%).
    RawProperties* props = nullptr;
  };
  // on_delivery's plan. `now` is steady_ms() (guard_delivery.cpp).
  DeliveryPlan plan_delivery(const Delivery& delivery, const retry::Policy& policy,
                             std::int64_t now, DeliveryReading& reading);
  // Keeps the CopyIntent of a delivery taken over before the client sees it: the decision, and
  // the header `reading` decoded. A decision a crash left pending is cleared from the tracker.
  void take_over_at_delivery(const Delivery& delivery, const retry::Policy& policy,
                             std::int64_t now, const retry::TrackerKey& key,
                             const std::string& identity,
                             const std::optional<retry::TrackerEntry>& entry,
                             const retry::Decision& decision, DeliveryReading& reading);
  // How a return of `delivery` is counted (count_return).
  enum class ReturnKind : std::uint8_t { requeue, crash, recover };
  // Counts a return of `delivery` in the queue's health and the tracker, and takes the final
  // decision (retry::decide_requeue, decide_crash or decide_recover); fills `intent` for a copy.
  retry::Outcome count_return(const Delivery& delivery, const Identified& id, ReturnKind kind,
                              const ReturnContext& context, bool consumer_timeout,
                              CopyIntent& intent);
  // A return that was not the message's doing (held back, never seen, a broker's going):
  // taken over with a copy of what it carries when `context` allows (on_taken_over follows),
  // else noted uncounted.
  ReturnAction uncounted_return(const Delivery& delivery, Identified& id,
                                const ReturnContext& context);
  // A delivery its client will never see (Delivery::unseen): decided as uncounted_return.
  DeliveryPlan plan_unseen(const Delivery& delivery, const retry::Policy& policy);
  // Tells the listener of a copy the outcome wanted and could not have (none for a first
  // delivery's body skipped by design, unless the copy was for the broker's limit).
  void report_fallback(const std::string& queue, const retry::Outcome& outcome);
  // What `intent` asks for `delivery`: its copy, or the reject of `via: reject`, or, when the
  // copy cannot be built, the delivery given back (an Outcome at once).
  TakeOver take_over(const Delivery& delivery, CopyIntent& intent);

  retry::GuardContext& context_;
  LimitWatch limits_;      // the queues' types and delivery limits, as this connection sees
  ConnectionFacts facts_;  // from on_open
  // What plan_delivery decodes a delivery's header into (DeliveryReading::props).
  RawProperties decoded_scratch_;
  int broker_major_ = 0;  // RabbitMQ's major version from connection.start, 0 if unknown
  std::mt19937_64 rng_;
  std::shared_ptr<const retry::PolicySet> policies_;
  std::uint64_t policies_version_ = 0;
  std::unordered_map<std::string, const retry::Policy*> policy_cache_;
  // Deliveries taken over before the client saw them, until their body is complete
  // (on_taken_over).
  std::map<DeliveryKey, CopyIntent> awaiting_body_;
  std::uint64_t next_job_ = 0;
  // Queues that lost unacked deliveries in the current batch of crash returns: a crash counts
  // once in a queue's health (as a return of its first message), however many prefetched
  // messages it gave back.
  struct CrashedQueue {
    std::string queue;
    const retry::Policy* policy = nullptr;
    std::uint64_t message = 0;
  };
  std::vector<CrashedQueue> crashed_queues_;
};

}  // namespace nackguard::guard
