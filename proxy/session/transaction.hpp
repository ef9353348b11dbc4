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
#include <utility>
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

class ChannelTx {
 public:
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

  // The proxy's own settlements written on the channel since the last commit: the broker drops
  // them at a rollback, so they are written again after it.
  std::vector<amqp::Bytes> proxy_settles;

  // ---- the commit held for the proxy's settlements ----
  // The client's tx.commit `commit` is held until the proxy's settlement of each of
  // `broker_tags` is queued.
  void hold_commit(amqp::ByteView commit, std::vector<std::uint64_t> broker_tags) {
    held_commit_.emplace(commit.begin(), commit.end());
    awaiting_ = std::move(broker_tags);
  }
  // The proxy's settlement of `broker_tag` is queued. The held commit, once nothing else is
  // awaited: it is to be queued behind the settlements, and stays held until written.
  std::optional<amqp::Bytes> settlement_queued(std::uint64_t broker_tag) {
    if (!held_commit_) return std::nullopt;
    std::erase(awaiting_, broker_tag);
    if (!awaiting_.empty()) return std::nullopt;
    std::optional<amqp::Bytes> commit = std::move(held_commit_);
    held_commit_.reset();
    commit_queued_ = true;
    return commit;
  }
  // The commit was written: the frames that waited behind it are to be handled.
  void commit_written() {
    commit_queued_ = false;
    proxy_settles.clear();
    replay_pending_ = true;
  }
  // The broker closed the channel: a held commit is dropped, the frames behind it go on. False
  // if no commit was held.
  bool abandon() {
    if (!holds_commit()) return false;
    held_commit_.reset();
    awaiting_.clear();
    commit_queued_ = false;
    replay_pending_ = true;
    return true;
  }
  bool replay_pending() const { return replay_pending_; }
  // A client frame that came after the held commit, kept in order with its reservation
  // against the body budget.
  void keep(amqp::ByteView frame, std::shared_ptr<retry::RetainedBody> reservation) {
    queued_.insert(queued_.end(), frame.begin(), frame.end());
    queued_reservations_.push_back(std::move(reservation));
  }
  // The frames kept behind the commit, to handle now; their reservations end with the call.
  amqp::Bytes take_queued() {
    amqp::Bytes queued = std::move(queued_);
    queued_.clear();
    queued_reservations_.clear();
    replay_pending_ = false;
    return queued;
  }

  bool holds_commit() const { return held_commit_ || commit_queued_ || replay_pending_; }

 private:
  std::optional<amqp::Bytes> held_commit_;
  std::vector<std::uint64_t> awaiting_;
  bool commit_queued_ = false;
  bool replay_pending_ = false;
  amqp::Bytes queued_;
  std::vector<std::shared_ptr<retry::RetainedBody>> queued_reservations_;
};

}  // namespace nackguard::session
