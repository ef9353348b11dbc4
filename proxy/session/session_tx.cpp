// Channels in transaction mode: the client's tx.select, tx.commit and tx.rollback, and the
// commits the proxy holds until its own settlements are in the transaction (transaction.hpp).

#include <algorithm>
#include <limits>

#include "proxy/amqp/method_codec.hpp"
#include "proxy/session/ack_timeout.hpp"
#include "proxy/session/session.hpp"

namespace nackguard::session {

using amqp::Frame;
namespace reply = amqp::reply;

void Session::handle_client_tx_method(ChannelState& ch, const Frame& frame, std::uint32_t key) {
  ChannelTx& tx = ch.tx;
  if (key == tx_mid::select) {
    tx.active = true;
    emit(Side::broker, frame.raw);
    return;
  }
  if (key == tx_mid::rollback) {
    // RabbitMQ puts every delivery settled in the transaction back among the unacked.
    for (ChannelTx::Settled& s : ch.tx_take_settled()) ch.add_unacked(std::move(s.delivery));
    for (const TakeOver& take_over : tx.takeovers) {
      std::optional<Delivery> d = ch.remove_taken_over(take_over.ticket().broker_tag);
      if (!d) continue;  // given back meanwhile (a recover)
      d->taken_over = false;
      ch.add_unacked(std::move(*d));
    }
    tx.takeovers.clear();
    emit(Side::broker, frame.raw);
    // The proxy's own settlements went with the transaction: they go into the next one.
    std::vector<amqp::Bytes> resend = std::move(tx.proxy_settles);
    tx.proxy_settles.clear();
    for (amqp::Bytes& frames : resend) {
      Injection again{std::move(frames), frame.channel, std::nullopt};
      again.tx_resend = true;
      io(Side::broker).injections.push_back(std::move(again));
    }
    flush_injections(Side::broker);
    return;
  }
  if (key != tx_mid::commit) {
    emit(Side::broker, frame.raw);
    return;
  }
  for (const ChannelTx::Settled& s : ch.tx_take_settled()) {
    // A slim record (kept past the budget) was never shown to the observer.
    if ((s.kind == SettleKind::ack || !s.requeue) && !ChannelState::is_slim(s.delivery)) {
      observer_->on_settled(s.delivery, s.kind);
    }
  }
  std::vector<TakeOver> takeovers = std::move(tx.takeovers);
  tx.takeovers.clear();
  if (takeovers.empty()) {
    emit(Side::broker, frame.raw);
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
      carry_out(frame.channel, broker_tag, std::move(take_over));
    } else {
      tx_settlement_queued(ch, frame.channel, broker_tag);
    }
  }
  flush_injections(Side::broker);
}

void Session::queue_behind_commit(ChannelState& ch, const Frame& frame) {
  auto reservation = reserve_kept_frame(frame, "its tx.commit waited for the broker's confirms");
  if (reservation) ch.tx.keep(frame.raw, std::move(reservation));
}

std::shared_ptr<retry::RetainedBody> Session::reserve_kept_frame(const Frame& frame,
                                                                 std::string_view waiting_for) {
  auto reservation = retry::RetainedBody::make(options_.body_budget, frame.raw.size());
  if (!reservation) {
    protocol_error(Side::client, reply::resource_error,
                   "RESOURCE_ERROR - nackguard: channel " + std::to_string(frame.channel) +
                       " sent more than limits.retained_body_bytes allows while " +
                       std::string(waiting_for));
  }
  return reservation;
}

void Session::tx_settlement_queued(ChannelState& ch, std::uint16_t channel,
                                   std::uint64_t broker_tag) {
  std::optional<amqp::Bytes> frame = ch.tx.settlement_queued(broker_tag);
  if (!frame) return;
  // Behind the settlements in the injection queue, so that the commit takes them in.
  Injection commit{std::move(*frame), channel, std::nullopt};
  commit.tx_commit = true;
  io(Side::broker).injections.push_back(std::move(commit));
}

void Session::tx_commit_written(std::uint16_t channel) {
  auto it = channels_.find(channel);
  if (it == channels_.end()) return;
  it->second.tx.commit_written();
  tx_replay_pending_ = true;
}

void Session::tx_abandon(ChannelState& ch) {
  if (ch.tx.abandon()) tx_replay_pending_ = true;
}

void Session::tx_return_all(ChannelState& ch, ReturnCause cause) {
  ChannelTx& tx = ch.tx;
  // Settlements the broker had not committed: it requeues those deliveries. A requeue it was
  // given is counted already (at the client's nack or reject).
  for (const ChannelTx::Settled& s : ch.tx_take_settled()) {
    if ((s.kind == SettleKind::ack || !s.requeue) && !s.delivery.no_ack) {
      returned(s.delivery, end_cause(ch, s.delivery, cause), false);
    }
  }
  tx.takeovers.clear();  // taken over: reported with the channel's other taken-over deliveries
}

void Session::replay_behind_commits() {
  while (tx_replay_pending_) {
    tx_replay_pending_ = false;
    std::vector<std::uint16_t> ready;
    for (const auto& [number, ch] : channels_) {
      if (ch.tx.replay_pending()) ready.push_back(number);
    }
    std::sort(ready.begin(), ready.end());
    for (std::uint16_t number : ready) {
      auto it = channels_.find(number);
      if (it == channels_.end()) continue;
      // A commit met on the way is held again; the frames after it queue behind it.
      replay_client_frames(it->second.tx.take_queued());
    }
  }
}

void Session::replay_client_frames(const amqp::Bytes& queued) {
  amqp::FrameDecoder decoder(std::numeric_limits<std::uint32_t>::max());
  std::size_t at = 0;
  while (at < queued.size() && phase_ == Phase::open && proxy_close_ == ProxyClose::none &&
         !io(Side::client).input_closed) {
    amqp::FrameResult r = decoder.decode(amqp::ByteView(queued).subspan(at));
    if (r.status != amqp::FrameResult::Status::frame) break;
    at += r.frame.raw.size();
    handle_client_frame(r.frame);
  }
}

}  // namespace nackguard::session
