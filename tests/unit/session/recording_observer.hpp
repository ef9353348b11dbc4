#pragma once
// A SessionObserver that records every callback, both as values (for field checks) and as
// one line per callback in `events` (for checking order and "exactly once" at a glance):
//   "open /", "delivery ch1 b3", "taken-over ch1 b3 <body>", "settled ch1 b3 c2 ack",
//   "client-return ch1 b3 c2 nack", "taken-over ch1 b3 <no body>", "returned ch1 b3 recover",
//   "outcome ch1 b3 none" (with `copies`). on_returns_done, which ends every batch of returns (even
//   an
// empty one), is only counted, in `returns_done`.
// It takes over the deliveries named in `take_over_at_delivery` as they arrive, and the
// client's requeues of those named in `take_over`, both by (channel, broker tag). The bodies of
// the first are retained so the events can show them; and, at a client's close or crash, those
// named in `take_over_at_crash`.

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "proxy/retry/body_budget.hpp"
#include "proxy/session/observer.hpp"

namespace nackguard::session::test {

inline std::string_view to_string(SettleKind kind) {
  switch (kind) {
    case SettleKind::ack:
      return "ack";
    case SettleKind::nack:
      return "nack";
    case SettleKind::reject:
      return "reject";
  }
  return "?";
}

class RecordingObserver : public SessionObserver {
 public:
  using Key = std::pair<std::uint16_t, std::uint64_t>;  // channel, broker tag
  struct Settled {
    Delivery delivery;
    SettleKind kind;
  };
  struct Returned {
    Delivery delivery;
    ReturnCause cause;
    ReturnContext context;
  };

  std::set<Key> take_over_at_delivery;
  std::set<Key> take_over;
  // Deliveries it hands out with the redelivered bit set (DeliveryPlan::show_redelivered).
  std::set<Key> show_redelivered;
  // Deliveries a client's close or crash finds in its hands that it takes over (when the
  // session says it can).
  std::set<Key> take_over_at_crash;
  std::int64_t ack_timeout = 0;  // what ack_timeout_ms answers for every delivery

  std::vector<std::string> events;
  // How its take-overs go. By default a TakeOver the test carries out itself: no copy, and an
  // outcome answered with no settlement (the test settles with Session::settle_taken_over).
  // With `copies`, a TakeOver publishes a copy (to exchange "", routing key "copies") and the
  // outcome is answered with the settlement the guard would write: an ack once the copy is
  // confirmed, the consumer's own frame if it failed; each outcome is an event.
  bool copies = false;
  std::uint64_t jobs = 0;
  std::vector<std::string> opens;
  std::vector<Delivery> deliveries;
  std::vector<Delivery> taken_over;
  std::vector<Settled> settled;
  std::vector<Returned> client_returns;
  std::vector<Returned> returned;
  std::vector<Outcome> outcomes;
  int returns_done = 0;

  void on_open(const ConnectionFacts& facts) override {
    opens.push_back(facts.vhost);
    events.push_back("open " + facts.vhost);
  }
  bool forwards_first_deliveries() const override { return take_over_at_delivery.empty(); }
  DeliveryPlan on_delivery(const Delivery& d) override {
    deliveries.push_back(d);
    events.push_back("delivery " + name(d));
    DeliveryPlan plan;
    plan.show_redelivered = show_redelivered.count({d.channel, d.broker_tag}) > 0;
    if (take_over_at_delivery.count({d.channel, d.broker_tag})) {
      plan.action = DeliveryPlan::Action::take_over;
      plan.retain_body = true;
    }
    return plan;
  }
  void on_settled(const Delivery& d, SettleKind kind) override {
    settled.push_back({d, kind});
    events.push_back("settled " + name(d) + " c" + std::to_string(d.client_tag) + " " +
                     std::string(to_string(kind)));
  }
  std::optional<TakeOver> on_client_return(const Delivery& d, ReturnCause cause) override {
    client_returns.push_back({d, cause, {}});
    events.push_back("client-return " + name(d) + " c" + std::to_string(d.client_tag) + " " +
                     std::string(session::to_string(cause)));
    if (!take_over.count({d.channel, d.broker_tag})) return std::nullopt;
    std::optional<TakeOver> out = on_taken_over(d);
    const SettleKind fallback =
        cause == ReturnCause::reject ? SettleKind::reject : SettleKind::nack;
    out->at_once.ticket.fallback = fallback;
    if (out->copy) out->copy->ticket.fallback = fallback;
    return out;
  }
  std::optional<TakeOver> on_taken_over(const Delivery& d) override {
    taken_over.push_back(d);
    std::string body = d.body ? std::string(amqp::as_chars(d.body->bytes)) : "<no body>";
    events.push_back("taken-over " + name(d) + " " + body);
    TakeOver out;
    Ticket& ticket = out.at_once.ticket;
    ticket.channel = d.channel;
    ticket.broker_tag = d.broker_tag;
    ticket.job = ++jobs;
    if (!copies) return out;
    PublishRequest copy;
    copy.routing_key = "copies";
    copy.body = retry::RetainedBody::make(nullptr, 0);
    if (d.body) copy.body->bytes = d.body->bytes;
    copy.deadline_ms = 30000;
    copy.ticket = ticket;
    out.copy = std::move(copy);
    return out;
  }
  Settle on_outcome(const Outcome& o) override {
    outcomes.push_back(o);
    const Ticket& t = o.ticket;
    if (!copies) return {};  // channel 0: nothing is written
    events.push_back("outcome " + name(t) + " " + std::string(retry::to_string(o.failure)));
    if (o.failure != retry::FallbackCause::none) return {t.channel, t.broker_tag, t.fallback, true};
    return {t.channel, t.broker_tag, SettleKind::ack, false};
  }
  ReturnDecision on_returned(const Delivery& d, ReturnCause cause,
                             const ReturnContext& context) override {
    returned.push_back({d, cause, context});
    events.push_back("returned " + name(d) + " " + std::string(session::to_string(cause)));
    if (!context.can_take_over || !take_over_at_crash.count({d.channel, d.broker_tag})) return {};
    // A held-back delivery's body is in its buffered frames: on_taken_over follows.
    if (d.held_back) return {ReturnAction::take_over, std::nullopt};
    return {ReturnAction::take_over, on_taken_over(d)};
  }
  void on_returns_done() override { ++returns_done; }
  std::int64_t ack_timeout_ms(const Delivery&) override { return ack_timeout; }
  void on_ack_timeout(const Delivery& d, std::int64_t held_ms) override {
    events.push_back("ack-timeout " + name(d) + " held " + std::to_string(held_ms));
  }

  // The events recorded since the last call, which forgets them.
  std::vector<std::string> take_events() {
    std::vector<std::string> out;
    out.swap(events);
    return out;
  }

  static std::string name(const Ticket& t) {
    return "ch" + std::to_string(t.channel) + " b" + std::to_string(t.broker_tag);
  }
  static std::string name(const Delivery& d) {
    return "ch" + std::to_string(d.channel) + " b" + std::to_string(d.broker_tag);
  }
};

}  // namespace nackguard::session::test
