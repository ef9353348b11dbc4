#pragma once
// A channel in transaction mode: the client's tx.select, tx.commit and tx.rollback applied, and
// the commits the proxy holds until its own settlements are in the transaction
// (transaction.hpp). Works on the session's core; the frames that waited behind a commit now
// written the Session replays (Session::replay_behind_commits).

#include <cstdint>

#include "proxy/amqp/frame.hpp"
#include "proxy/session/session_core.hpp"

namespace nackguard::session {

class TxMethods {
 public:
  explicit TxMethods(SessionCore& core) : core_(core) {}

  // tx.select, tx.commit or tx.rollback from the client on `ch`.
  void method(ChannelState& ch, const amqp::Frame& frame, std::uint32_t key);
  // A client frame on a channel whose commit is held: kept, in order, for later.
  void queue_behind_commit(ChannelState& ch, const amqp::Frame& frame);
  // The broker closes the channel: a held commit is dropped, the frames behind it go on.
  void abandon(ChannelState& ch);

 private:
  void rollback(ChannelState& ch, const amqp::Frame& frame);
  void commit(ChannelState& ch, const amqp::Frame& frame);

  SessionCore& core_;
};

}  // namespace nackguard::session
