#pragma once
// The redelivery guard of one connection: it implements the session's observer, counts each
// return in the shared tracker, and per the queue's policy lets a requeue through, turns it
// into a delayed republish, or dead-letters the message. It acks an original upstream only
// after the broker confirmed its copy; whatever it cannot complete, it gives back to the
// broker as the consumer asked. It never calls the session: what it sends and settles, it
// returns as ObserverActions, which the session applies.

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "proxy/retry/guard_context.hpp"
#include "proxy/retry/outcome.hpp"
#include "proxy/session/observer.hpp"
#include "proxy/session/proxy_channel.hpp"
#include "proxy/session/raw_properties.hpp"
#include "proxy/session/session.hpp"

namespace nackguard::session {

class Guard final : public SessionObserver {
 public:
  Guard(retry::GuardContext& context, std::uint64_t seed);

  // The connection is gone: pending republishes are abandoned (the broker requeues them).
  void on_connection_end();
  // Republishes and dead-letters still waiting for the broker's confirm.
  std::size_t outstanding() const { return proxy_.outstanding(); }

  void on_open(const ConnectionFacts& facts) override;
  // Called about once a second: confirms that never came fall back.
  ObserverActions on_tick() override;
  DeliveryPlan on_delivery(const Delivery& delivery) override;
  // A first delivery carries no count to decide on: plan_delivery forwards it.
  bool forwards_first_deliveries() const override { return true; }
  bool decide_before_holding_back(const Delivery& delivery) override;
  void on_settled(const Delivery& delivery, SettleKind kind) override;
  ReturnAction on_client_return(const Delivery& delivery, ReturnCause cause) override;
  ObserverActions on_taken_over(const Delivery& delivery) override;
  void on_settle_written(const Settle& settle, bool written) override;
  void on_takeover_dropped(const Delivery& delivery) override;
  ReturnAction on_returned(const Delivery& delivery, ReturnCause cause,
                           const ReturnContext& context) override;
  void on_returns_done() override;
  ObserverActions on_proxy_channel_frame(const amqp::Frame& frame) override;
  void on_queue_declare(const amqp::QueueDeclare& declare) override;
  // The policy's ack_timeout (guard_timeout.cpp).
  std::int64_t ack_timeout_ms(const Delivery& delivery) override;
  void on_ack_timeout(const Delivery& delivery, std::int64_t held_ms) override;

 private:
  using DeliveryKey = std::pair<std::uint16_t, std::uint64_t>;  // channel, broker tag

  // What the guard will do with a delivery it owns.
  struct Intent {
    retry::Decision decision;
    std::shared_ptr<const retry::PolicySet> policies;  // keeps `policy` alive across reloads
    const retry::Policy* policy = nullptr;
    retry::TrackerKey key;
    std::string identity;
    std::string queue;
    std::int64_t first_return_ms = 0;
    std::int64_t last_return_ms = 0;
    SettleKind fallback = SettleKind::nack;  // how to give it back if the copy fails
    std::uint64_t job = 0;
    // The delivery's content header as the decision decoded it, until build_copy takes it.
    std::optional<RawProperties> props;
    // The ack after the copy's confirm (or the reject of `via: reject`) is asked for: the
    // outcome is recorded once on_settle_written says it went out.
    bool settling = false;
  };

  struct Identified {
    const retry::Policy* policy = nullptr;
    RawProperties props;  // the content header, decoded
    std::optional<std::string> identity;
  };

  const retry::Policy& policy_for(const std::string& queue);
  // A delivery from `queue` carried x-delivery-count: it is a quorum queue.
  void learn_quorum(const std::string& queue);
  // Asks the management API of `queue`'s limit, once per refresh interval
  // (guard_broker_limit.cpp).
  void ask_limit(const std::string& queue);
  // The broker's delivery limit in force on `queue` (retry::broker_delivery_limit).
  retry::LimitInForce broker_limit(const retry::Policy& policy, const std::string& queue);
  // Whether one more return of a delivery that carries `carried` would pass the broker's
  // delivery limit, and a copy can be published to prevent it.
  bool at_broker_limit(const Delivery& delivery, const retry::Policy& policy,
                       const retry::CarriedCount& carried);
  // What the final decisions need to know besides the message (retry::Circumstances).
  retry::Circumstances circumstances(const Delivery& delivery, const retry::Policy& policy);
  // Whether one return of a message that carries no x-delivery-count passes the broker's
  // delivery limit on `queue` (a limit of 0 or 1).
  bool first_return_passes_broker_limit(const retry::Policy& policy, const std::string& queue);
  // Whether a first delivery (not redelivered, no count carried) keeps its body: whether its
  // first return may need a copy, under `policy` and with the queue's `health` at its
  // delivery (guard_body.cpp).
  bool first_delivery_keeps_body(const Delivery& delivery, const retry::Policy& policy,
                                 const retry::HealthChange& health);
  // Whether a delivery that keeps no body must still have it hashed as it passes: whether its
  // identity under `policy` may fall back to the body (guard_body.cpp). `decoded`: its content
  // header, if plan_delivery decoded it already.
  static bool body_hash_needed(const Delivery& delivery, const retry::Policy& policy,
                               const RawProperties* decoded);
  // The copy of a taken-over delivery that `intent` asks for; false if it cannot be built
  // (`cause` and `detail` then say why).
  bool build_copy(const Delivery& delivery, Intent& intent, PublishRequest& request,
                  retry::FallbackCause& cause, const char*& detail);
  // The two kinds of copy build_copy makes, each with its own headers and address: a
  // dead-letter (to the policy's exchange, or its dead-letter queue, declared if missing), and
  // a delayed copy (to the delay queue of the policy's backoff, declared if missing).
  void build_dead_letter(const Intent& intent, std::vector<HeaderEdit>& edits,
                         PublishRequest& request, retry::QueueType type,
                         std::int64_t last_return_ms);
  static void build_delayed(const Intent& intent, PublishRequest& request, retry::QueueType type);
  // The copy's content header: the message's properties with `edits` applied; false if it
  // cannot be made (`cause` and `detail` then say why).
  bool build_copy_header(const Delivery& delivery, RawProperties& props,
                         const std::vector<HeaderEdit>& edits, PublishRequest& request,
                         retry::FallbackCause& cause, const char*& detail);
  bool identify(const Delivery& delivery, Identified& out);
  // What plan_delivery learnt of a delivery besides its plan.
  struct DeliveryReading {
    // The message's hash when it may have been delivered before (for the queue's health).
    std::optional<std::uint64_t> seen;
    // A first delivery: not redelivered, no count carried, not a copy of nackguard's.
    bool first = false;
    // The content header, if it was decoded and the delivery was not taken over (an Intent
    // then has it): decoded_scratch_. A pointer, not the value: a RawProperties in the
    // struct had every delivery zero-fill its 600-odd bytes (session_bench, +2%).
    RawProperties* props = nullptr;
  };
  // on_delivery's plan. `now` is steady_ms() (guard_delivery.cpp).
  DeliveryPlan plan_delivery(const Delivery& delivery, const retry::Policy& policy,
                             std::int64_t now, DeliveryReading& reading);
  // Keeps the Intent of a delivery taken over before the client sees it: the decision, and
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
                              const ReturnContext& context, bool consumer_timeout, Intent& intent);
  // A return that was not the message's doing (held back, never seen, a broker's going):
  // taken over with a copy of what it carries when `context` allows, else noted uncounted.
  ReturnAction uncounted_return(const Delivery& delivery, Identified& id,
                                const ReturnContext& context);
  // A delivery its client will never see (Delivery::unseen): decided as uncounted_return.
  DeliveryPlan plan_unseen(const Delivery& delivery, const retry::Policy& policy);
  // Tells the listener of a copy the outcome wanted and could not have (none for a first
  // delivery's body skipped by design, unless the copy was for the broker's limit).
  void report_fallback(const std::string& queue, const retry::Outcome& outcome);
  void execute(const Delivery& delivery);
  void finish_job(std::uint64_t job, retry::FallbackCause failure, const std::string& why);
  // Asks the session to settle a taken-over delivery (an ObserverAction::settle).
  void settle(const DeliveryKey& key, SettleKind kind, bool requeue);
  // The actions gathered since the last call, for an entry point to return.
  ObserverActions take_actions() { return std::exchange(actions_, {}); }
  void give_back(const DeliveryKey& key, const Intent& intent, retry::FallbackCause cause,
                 std::string_view detail);
  static bool needs_copy(const Intent& intent);

  retry::GuardContext& context_;
  ConnectionFacts facts_;    // from on_open
  ObserverActions actions_;  // for the entry point running now to return
  // What plan_delivery decodes a delivery's header into (DeliveryReading::props).
  RawProperties decoded_scratch_;
  int broker_major_ = 0;  // RabbitMQ's major version from connection.start, 0 if unknown
  std::mt19937_64 rng_;
  std::shared_ptr<const retry::PolicySet> policies_;
  std::uint64_t policies_version_ = 0;
  std::unordered_map<std::string, const retry::Policy*> policy_cache_;
  std::unordered_set<std::string> quorum_learnt_;  // queues told to queue_facts() as quorum
  // Queues ask_limit asked of, and when it asks again (steady ms).
  std::unordered_map<std::string, std::int64_t> limits_asked_;
  std::map<DeliveryKey, Intent> intents_;
  std::unordered_map<std::uint64_t, DeliveryKey> jobs_;
  std::uint64_t next_job_ = 0;
  ProxyChannel proxy_;
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

}  // namespace nackguard::session
