#pragma once
// A client channel in transaction mode (tx.select). RabbitMQ keeps the channel's acks, nacks
// and rejects, and its publishes, until tx.commit, and drops them at tx.rollback: a delivery
// settled in a rolled-back transaction is unacked again and may be settled anew. An ack the
// proxy sends on the channel is part of the client's transaction too (acks are channel-scoped).
// So on a tx channel:
//   - a requeue the proxy takes over is decided at the client's nack or reject, but applied at
//     its tx.commit: the client's frame is kept from the broker, and no copy is published before
//     the commit;
//   - the commit is held until each copy of the transaction is confirmed (its ack sent before
//     the commit) or given up (the client's own nack or reject sent instead); the client's later
//     frames on the channel wait behind it, in order;
//   - a rollback puts every delivery the client settled in the transaction, the taken-over ones
//     included, back among the unacked, as the broker does, and sends again the proxy's own
//     settlements the broker just dropped with the transaction.

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "proxy/amqp/bytes.hpp"
#include "proxy/amqp/constants.hpp"
#include "proxy/retry/body_budget.hpp"
#include "proxy/session/delivery.hpp"
#include "proxy/session/observer.hpp"

namespace nackguard::session {

namespace tx_mid {
inline constexpr std::uint32_t select = amqp::method_key(90, 10);
inline constexpr std::uint32_t select_ok = amqp::method_key(90, 11);
inline constexpr std::uint32_t commit = amqp::method_key(90, 20);
inline constexpr std::uint32_t commit_ok = amqp::method_key(90, 21);
inline constexpr std::uint32_t rollback = amqp::method_key(90, 30);
inline constexpr std::uint32_t rollback_ok = amqp::method_key(90, 31);
}  // namespace tx_mid

struct ChannelTx {
  bool active = false;  // the client sent tx.select on the channel

  // A delivery the client settled in the open transaction, and how. Requeues that were
  // forwarded are counted already; acks and settlements without requeue reach the observer
  // (on_settled) at the commit.
  struct Settled {
    Delivery delivery;
    SettleKind kind = SettleKind::ack;
    bool requeue = false;
    std::uint64_t cost = 0;  // charged to the channel's records (ChannelState::tx_settle)
  };
  std::vector<Settled> settled;
  // The client's requeues taken over in the open transaction: taken over, carried out (their
  // copies published) only at the commit; a rollback drops them.
  std::vector<TakeOver> takeovers;

  // A tx.commit held until the proxy's settlement of each tag in `awaiting` is queued; then
  // queued itself behind them (commit_queued) until written, and the frames that waited
  // behind it are handled (replay_pending).
  std::optional<amqp::Bytes> held_commit;
  std::vector<std::uint64_t> awaiting;
  bool commit_queued = false;
  bool replay_pending = false;
  // The client's frames on the channel that came after the held commit, whole and in order,
  // with their bytes counted against the body budget.
  amqp::Bytes queued;
  std::vector<std::shared_ptr<retry::RetainedBody>> queued_reservations;

  // The proxy's own settlements written on the channel since the last commit: the broker drops
  // them at a rollback, so they are written again after it.
  std::vector<amqp::Bytes> proxy_settles;

  bool holds_commit() const { return held_commit || commit_queued || replay_pending; }
};

}  // namespace nackguard::session
