#pragma once
// Per-channel state: content sequences in each direction, consumers, pending gets, and the
// unacked deliveries with the mapping between the broker's and the client's delivery tags.

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "proxy/amqp/bytes.hpp"
#include "proxy/session/content_state.hpp"
#include "proxy/session/delivery.hpp"
#include "proxy/session/held_close.hpp"
#include "proxy/session/suspect_gate.hpp"
#include "proxy/session/tag_map.hpp"
#include "proxy/session/transaction.hpp"

namespace nackguard::session {

// Streaming XXH3-64 over a delivery's body frames.
class BodyHasher {
 public:
  BodyHasher();
  ~BodyHasher();
  BodyHasher(const BodyHasher&) = delete;
  BodyHasher& operator=(const BodyHasher&) = delete;
  void reset();
  void update(amqp::ByteView bytes);
  std::uint64_t digest() const;

 private:
  void* state_;
};

struct Consumer {
  std::string queue;
  bool no_ack = false;
};

struct PendingConsume {
  std::string queue;
  std::string consumer_tag;
  bool no_ack = false;
};

struct PendingGet {
  std::string queue;
  bool no_ack = false;
};

// A channel's consumers and gets, kept from the basic-class methods (basic_methods.hpp): the
// queue a delivery comes from, and whether it needs an ack.
struct ConsumerBook {
  std::unordered_map<std::string, Consumer> consumers;
  // Consumers cancelled with no-wait: their deliveries in flight still name them.
  std::deque<std::pair<std::string, Consumer>> cancelled;
  const Consumer* find(const std::string& tag) const;
  void forget(const std::string& tag);
  std::deque<PendingConsume> pending_consumes;
  std::deque<PendingGet> pending_gets;
  std::string last_declared_queue;  // what an empty queue name in consume or get means
};

// A channel's incoming delivery (ChannelState::incoming) on its way: how the delivery router
// routes its frames once its header is in, and what it keeps of them meanwhile.
struct IncomingRoute {
  amqp::Bytes method_frame;  // held until the header arrives
  // The same frame where it was read, while it is still there (DeliveryRouter::original_method).
  amqp::ByteView method_raw;
  std::uint64_t method_pass = 0;
  enum class Route { forward, take_over, buffer };
  Route route = Route::forward;
  amqp::Bytes frames;  // for Route::buffer: method, header and body frames so far
  std::shared_ptr<retry::RetainedBody> reservation;  // for Route::buffer
  // The plan of the delivery when it is buffered to wait as a suspect.
  std::optional<DeliveryPlan> plan;
  bool untracked = false;              // forwarded untracked
  bool hashed = true;                  // its body is hashed as it passes (DeliveryPlan::hash_body)
  std::unique_ptr<BodyHasher> hasher;  // reused across deliveries
};

class ChannelState {
 public:
  // Content sequence of the client's publishes (client to broker), and of what the proxy
  // emits to the client (deliveries, returns, get-oks).
  ContentState from_client;
  ContentState to_client;
  // Broker-to-client content as received, which differs from to_client while a delivery's
  // method is held until its header arrives, or while a taken-over delivery's body is swallowed.
  ContentState from_broker;

  ConsumerBook book;     // its consumers and gets (basic_methods.hpp)
  bool closing = false;  // a channel.close was sent by either side
  HeldClose held_close;  // the client's channel.close, held (held_close.hpp)
  ChannelTx tx;          // transaction mode (tx.select), see transaction.hpp
  // The channel closes because an acknowledgement timed out (RabbitMQ's consumer_timeout or
  // the policy's ack_timeout): only the delivery timed_out_broker_tag names counts a return,
  // the others go back uncounted (ack_closes.cpp).
  bool ack_timed_out = false;
  std::optional<std::uint64_t> timed_out_broker_tag;
  // The proxy closes the channel itself, on both sides, because a delivery stayed unacked
  // past its ack_timeout (ack_closes.cpp): it ends once both close-oks are in.
  struct AckClose {
    bool active = false;
    bool client_done = false;  // the client's close-ok (or its own close) came
    bool broker_done = false;
    // Client frames after its close-ok (a channel.open of the same number, ...), handled once
    // the broker's close-ok is in.
    amqp::Bytes queued;
    std::vector<std::shared_ptr<retry::RetainedBody>> reservations;
    void keep(amqp::ByteView frame, std::shared_ptr<retry::RetainedBody> reservation) {
      queued.insert(queued.end(), frame.begin(), frame.end());
      reservations.push_back(std::move(reservation));
    }
  };
  AckClose ack_close;
  // A delivery the client settled in its open transaction (tx.settled): its record stays
  // charged to the body budget, as while it was unacked, until the commit or rollback.
  void tx_settle(Delivery delivery, SettleKind kind, bool requeue);
  // The open transaction's settlements, removed (and no longer charged).
  std::vector<ChannelTx::Settled> tx_take_settled();
  // Deliveries handed out before the session's clock started get its first reading.
  void stamp_handed_out(std::int64_t now_ms);

  // The delivery whose method arrived and whose header or body is still arriving.
  std::optional<Delivery> incoming;
  // How its frames go on (delivery_router.hpp), and their bookkeeping.
  IncomingRoute routing;

  // Closed while the client holds a suspect alone: later deliveries wait in `held_back`.
  SuspectGate gate;
  struct HeldBackDelivery {
    Delivery delivery;
    amqp::Bytes frames;  // method (unpatched), header and body frames, as received
    std::shared_ptr<retry::RetainedBody> reservation;
    // Decided already: a suspect waiting, at the front, for the client's hands to be empty,
    // so that it is handed out alone (suspect_waits). Otherwise decided when released.
    std::optional<DeliveryPlan> plan;
  };
  std::deque<HeldBackDelivery> held_back;
  // A suspect waits at the front of held_back for the client to settle what it holds.
  bool suspect_waits() const {
    return !gate.closed() && !held_back.empty() && held_back.front().plan.has_value();
  }

  // The tag map (tag_map.hpp): the two tag sequences and the runs of untracked deliveries.
  std::uint64_t next_client_tag() { return tags_.next_client_tag(); }
  std::uint64_t last_client_tag() const { return tags_.last_client_tag(); }
  void note_broker_tag(std::uint64_t tag) { tags_.note_broker_tag(tag); }
  bool tags_identical() const { return tags_.identical(); }
  void note_owned() { tags_.note_owned(); }

  // What keeping a delivery's record costs in memory, charged to the body budget while it is
  // unacked or taken over: the record and its map node, its content header and its strings.
  static std::uint64_t record_cost(const Delivery& delivery);
  // Charges the records from now on to `budget` (set once, before the first record).
  void use_budget(retry::BodyBudget* budget) {
    if (!records_charge_.budget() && records_charge_.bytes() == 0) {
      records_charge_ = retry::BudgetCharge(budget);
    }
  }
  // A delivery kept with no more than its tags (the budget was full): no header, no names.
  // The session tells the observer nothing of it; it is settled as the client says.
  static void make_slim(Delivery& delivery);
  static bool is_slim(const Delivery& delivery) { return delivery.header_payload.empty(); }
  // A delivery handed out with no record (the budget was full): false if it needs one
  // after all, its tags alone, because the channel has kMaxUntrackedRuns runs already.
  // Untracked deliveries are remembered as runs of client tags whose broker tag is the client
  // tag plus the same offset, so that the client's settlement of one maps without a record.
  bool note_untracked(std::uint64_t client_tag, std::uint64_t broker_tag);
  static constexpr std::size_t kMaxUntrackedRuns = TagMap::kMaxRuns;
  // The broker tag of client tag `tag` if it may be one forwarded untracked (it has no record
  // and is not the proxy's); nullopt otherwise.
  std::optional<std::uint64_t> untracked_broker_tag(std::uint64_t tag) const;
  bool has_untracked() const { return tags_.has_runs(); }
  // A delivery handed to the client (client tag `client_tag`, broker tag `broker_tag`).
  void note_handed_out(std::uint64_t client_tag, std::uint64_t broker_tag) {
    tags_.note_handed_out(client_tag, broker_tag);
  }
  // Whether an unacked delivery has a broker tag at or below `broker_tag`: after a reorder,
  // a multiple settlement up to that tag would take one the client did not name.
  bool unacked_at_or_below(std::uint64_t broker_tag) const;

  // A delivery to fill in: a settled one's strings and header buffer (recycle) serve it
  // when there is one, so that a delivery in the usual flow allocates nothing.
  Delivery fresh_delivery();
  // Keeps a settled delivery's buffers for fresh_delivery (its body is dropped), up to
  // kSpareDeliveries per channel; beyond that, or with a header buffer over kMaxSpareHeader
  // bytes, it is freed.
  void recycle(Delivery&& delivery);
  static constexpr std::size_t kSpareDeliveries = 8;
  static constexpr std::size_t kMaxSpareHeader = 4096;

  void add_unacked(Delivery delivery);
  void add_taken_over(Delivery delivery);
  const Delivery* find_unacked(std::uint64_t client_tag) const;
  Delivery* find_taken_over(std::uint64_t broker_tag);
  const Delivery* find_taken_over(std::uint64_t broker_tag) const {
    return const_cast<ChannelState*>(this)->find_taken_over(broker_tag);
  }
  // Removes and returns the deliveries a client ack/nack/reject names: one tag, or with
  // `multiple` every tag up to it (0 meaning all).
  std::vector<Delivery> take_settled(std::uint64_t client_tag, bool multiple);
  // The same, appended to `out`.
  void take_settled(std::uint64_t client_tag, bool multiple, std::vector<Delivery>& out);
  std::optional<Delivery> remove_taken_over(std::uint64_t broker_tag);
  // Whether a taken-over or held-back delivery has a broker tag at or below `broker_tag`: a
  // multiple ack up to that tag would then settle it too.
  bool owned_at_or_below(std::uint64_t broker_tag) const;
  // Every unacked and taken-over delivery, removed: the channel ended or recovered.
  std::vector<Delivery> take_all();
  // Every unacked delivery (not the taken-over ones), removed: basic.recover.
  std::vector<Delivery> take_unacked();

  std::size_t unacked_count() const { return unacked_.size(); }
  // The client tags of the deliveries in the client's hands: unacked, with a record (not slim).
  std::vector<std::uint64_t> in_hand_tags() const;
  // The broker took back what consumer `consumer_tag` held (RabbitMQ 4.3 cancels a consumer
  // whose delivery timed out, and requeues its deliveries). The client still holds them and
  // may settle them, so their tags stay; but their records become slim: no settlement of
  // theirs is a return any more. Returns them as they were, the broker's oldest first.
  std::vector<Delivery> requeued_by_broker(const std::string& consumer_tag);
  // The client's close or crash found the deliveries up to this client tag in its hands, and
  // the observer counted them then (session_core_end.cpp); later ones were never seen by the
  // client. 0: no crash.
  std::uint64_t crash_tag = 0;
  // The client closed the channel or the connection, or went away: what the broker delivers
  // now, the client never sees (Delivery::unseen; session_core_end.cpp).
  bool client_left = false;
  // Its consumers were cancelled while a crash's close waits, and how many cancel-oks are still
  // to come (session_core_end.cpp).
  bool consumers_cancelled = false;
  std::uint32_t cancels_pending = 0;
  // The delivery RabbitMQ's consumer_timeout looks at: the one the broker handed out first
  // (the lowest broker tag) of those it has not seen settled. Its broker tag if the client
  // holds it unacked with a record; nullopt if it is the proxy's (taken over or held back), settled
  // in an open transaction, untracked, or if there is none.
  std::optional<std::uint64_t> broker_oldest_unsettled() const;
  // The unacked delivery with a record the client has held longest (the lowest client tag),
  // or nullptr.
  const Delivery* oldest_unacked() const;
  std::size_t taken_over_count() const { return taken_over_.size(); }
  // Bytes the records of this channel hold in the body budget.
  std::uint64_t records_bytes() const { return records_charge_.bytes(); }

 private:
  struct Record {
    Delivery delivery;
    std::uint64_t cost = 0;  // charged to records_charge_ while in a map
  };
  Record make_record(Delivery delivery);
  Delivery drop_record(Record& record);

  std::map<std::uint64_t, Record> unacked_;  // by client tag
  // The nodes of the last deliveries settled alone (at most kSpareDeliveries), reused for the
  // next ones: no allocation per delivery in the usual one-ack-per-delivery flow, even when
  // the broker sends a burst of deliveries after a burst of acks.
  std::vector<std::map<std::uint64_t, Record>::node_type> spare_nodes_;
  std::vector<Delivery> spare_deliveries_;
  std::map<std::uint64_t, Record> taken_over_;  // by broker tag
  retry::BudgetCharge records_charge_;
  TagMap tags_;
};

}  // namespace nackguard::session
