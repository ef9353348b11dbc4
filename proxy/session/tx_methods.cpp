// The client's tx methods (tx_methods.hpp): a commit held until the proxy's settlements of the
// deliveries it took over in the transaction are in it.

#include "proxy/session/tx_methods.hpp"

#include "proxy/amqp/method_codec.hpp"

namespace nackguard::session {

using amqp::Frame;

void TxMethods::method(ChannelState& ch, const Frame& frame, std::uint32_t key) {
  if (key == tx_mid::select) {
    ch.tx.active = true;
  } else if (key == tx_mid::rollback) {
    return rollback(ch, frame);
  } else if (key == tx_mid::commit) {
    return commit(ch, frame);
  }
  core_.emit(Side::broker, frame.raw);
}

void TxMethods::rollback(ChannelState& ch, const Frame& frame) {
  ChannelTx& tx = ch.tx;
  // RabbitMQ puts every delivery settled in the transaction back among the unacked.
  for (ChannelTx::Settled& s : ch.tx_take_settled()) ch.add_unacked(std::move(s.delivery));
  for (const TakeOver& take_over : tx.takeovers) {
    std::optional<Delivery> d = ch.remove_taken_over(take_over.ticket().broker_tag);
    if (!d) continue;  // given back meanwhile (a recover)
    d->taken_over = false;
    ch.add_unacked(std::move(*d));
  }
  tx.takeovers.clear();
  core_.emit(Side::broker, frame.raw);
  // The proxy's own settlements went with the transaction: they go into the next one.
  std::vector<amqp::Bytes> resend = std::move(tx.proxy_settles);
  tx.proxy_settles.clear();
  for (amqp::Bytes& frames : resend) {
    SessionCore::Injection again{std::move(frames), frame.channel, std::nullopt};
    again.tx_resend = true;
    core_.io(Side::broker).injections.push_back(std::move(again));
  }
  core_.flush_injections(Side::broker);
}

void TxMethods::commit(ChannelState& ch, const Frame& frame) {
  ChannelTx& tx = ch.tx;
  for (const ChannelTx::Settled& s : ch.tx_take_settled()) {
    // A slim record (kept past the budget) was never shown to the observer.
    if ((s.kind == SettleKind::ack || !s.requeue) && !ChannelState::is_slim(s.delivery)) {
      core_.observer_->on_settled(s.delivery, s.kind);
    }
  }
  std::vector<TakeOver> takeovers = std::move(tx.takeovers);
  tx.takeovers.clear();
  if (takeovers.empty()) {
    core_.emit(Side::broker, frame.raw);
    tx.proxy_settles.clear();
    return;
  }
  // The copies are published now; the commit follows the proxy's settlement of each.
  std::vector<std::uint64_t> awaited;
  for (const TakeOver& take_over : takeovers) awaited.push_back(take_over.ticket().broker_tag);
  tx.hold_commit(frame.raw, std::move(awaited));
  for (TakeOver& take_over : takeovers) {
    const std::uint64_t broker_tag = take_over.ticket().broker_tag;
    const Delivery* d = ch.find_taken_over(broker_tag);
    if (d && !d->settling) {
      core_.carry_out(frame.channel, broker_tag, std::move(take_over));
    } else {
      core_.tx_settlement_queued(ch, frame.channel, broker_tag);
    }
  }
  core_.flush_injections(Side::broker);
}

void TxMethods::queue_behind_commit(ChannelState& ch, const Frame& frame) {
  auto reservation =
      core_.reserve_kept_frame(frame, "its tx.commit waited for the broker's confirms");
  if (reservation) ch.tx.keep(frame.raw, std::move(reservation));
}

void TxMethods::abandon(ChannelState& ch) {
  if (ch.tx.abandon()) core_.tx_replay_pending_ = true;
}

}  // namespace nackguard::session
