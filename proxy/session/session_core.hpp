#pragma once
// What every part of a connection's handling shares, and the changes they all make: the two
// sides' bytes (input buffers, outboxes, injections), the channels, the connection's phase, the
// take-overs carried out and their settlements written, a crash's returns and holds, and the
// connection's end. The Session (session.hpp) dispatches frames onto it; the transactions
// (transactions.hpp) and the proxy's ack-timeout closes (ack_closes.hpp) work on it too. It
// calls none of them.

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "proxy/amqp/frame.hpp"
#include "proxy/amqp/methods.hpp"
#include "proxy/session/channel.hpp"
#include "proxy/session/channel_table.hpp"
#include "proxy/session/connection_hold.hpp"
#include "proxy/session/delivery_router.hpp"
#include "proxy/session/handshake.hpp"
#include "proxy/session/input_buffer.hpp"
#include "proxy/session/observer.hpp"
#include "proxy/session/outbox.hpp"
#include "proxy/session/waited.hpp"

namespace nackguard::session {

enum class Side : std::uint8_t { client = 0, broker = 1 };
constexpr Side other(Side side) {
  return side == Side::client ? Side::broker : Side::client;
}
std::string_view to_string(Side side);

struct SessionOptions {
  // The largest frame_max the two sides may negotiate; the broker's offer is lowered to it.
  std::uint32_t max_frame_bytes = 1048576;
  // Retained bodies and held-back deliveries count against this; nullptr means no limit.
  retry::BodyBudget* body_budget = nullptr;
  // A client that keeps a suspect delivery (crash_suspect in the tracker) this long without
  // settling it gets the deliveries held back behind it anyway: it may be waiting for a batch
  // before it acks.
  std::int64_t suspect_hold_ms = 10000;
  // The steady clock, in milliseconds, for the proxy's channel's deadlines (a copy's confirm,
  // a declaration's retry): the guard's, so that both read the same time. Without it, on_tick's
  // last reading.
  std::function<std::int64_t()> steady_ms = nullptr;
};

struct SessionStats {
  std::array<std::uint64_t, 2> frames{};  // indexed by the side that sent them
  std::array<std::uint64_t, 2> bytes{};
};

class SessionCore {
 public:
  SessionCore(SessionOptions options, SessionObserver* observer);
  SessionCore(const SessionCore&) = delete;
  SessionCore& operator=(const SessionCore&) = delete;

  enum class Phase { protocol_header, handshake, open, closed };
  enum class ProxyClose { none, awaiting_client, awaiting_broker };

  struct Injection {
    amqp::Bytes frames;
    std::uint16_t channel = 0;  // 0: not tied to a client channel
    // A taken-over delivery this settles: it stays taken over (so a client's multiple ack keeps
    // around it, and a connection lost first reports it) until the frame is written.
    std::optional<Settle> settles;
    bool tx_commit = false;  // a client's tx.commit the proxy held (transaction.hpp)
    bool tx_resend = false;  // a proxy settlement written again after the client's rollback
  };

  struct SideIo {
    InputBuffer in;  // a partial frame carried over to the next read
    Outbox out;      // its source is the other side's `in`
    std::vector<Injection> injections;
    amqp::FrameDecoder decoder;
    std::size_t received = 0;  // bytes receive() took that handle_input() has not handled
    bool input_closed = false;
  };

  SideIo& io(Side side) { return io_[static_cast<int>(side)]; }
  const SideIo& io(Side side) const { return io_[static_cast<int>(side)]; }
  void finish_bookkeeping() {
    if (router_.has_deferred()) router_.settle_deferred();
  }
  std::optional<std::uint16_t> reserved_channel() const {
    return handshake_.tuning().reserved_channel();
  }
  bool finished() const { return io(Side::client).out.closed() && io(Side::broker).out.closed(); }

  // ---- the bytes (session_core.cpp) ----
  std::span<std::uint8_t> input_space(Side from, std::size_t buffer_bytes);
  void receive(Side from, std::size_t n);
  // Session::receive_input: the lone first delivery the relay may write ahead, or nothing.
  amqp::ByteView receive_input(Side from, std::size_t n);
  void written_ahead(Side to, std::size_t n);
  void emit(Side to, amqp::ByteView bytes) { io(to).out.emit(bytes); }
  // Queues whole frames for `to`, written at the next frame boundary that is not inside a
  // content sequence of any channel in that direction (Session::inject).
  void inject(Side to, amqp::Bytes frames);
  void flush_injections(Side to);
  // Drops queued injections for a channel that is closing: the broker requeues what they
  // would have settled, and frames on a closed channel would be a connection error.
  void drop_injections(std::uint16_t channel);
  // Drops every injection queued for `to`: the connection is ending.
  void drop_all_injections(Side to);
  bool content_in_progress(Side to) const;

  // ---- channels' ends and returns ----
  ChannelState& channel_state(std::uint16_t number) { return channels_[number]; }
  // Every delivery the channel knows is given back to the broker: report each once.
  void return_all(ChannelState& ch, ReturnCause cause);
  void end_channel(std::uint16_t number, ReturnCause cause);
  void end_all_channels(ReturnCause cause);
  void returned(const Delivery& delivery, ReturnCause cause, bool solo);
  // The client's settlements of an open transaction at the channel's end.
  void tx_return_all(ChannelState& ch, ReturnCause cause);

  // ---- take-overs carried out, and their settlements ----
  // Session::settle_taken_over.
  bool settle_taken_over(std::uint16_t channel, std::uint64_t broker_tag, SettleKind kind,
                         bool requeue);
  // Carries out the observer's TakeOver of a delivery the session has marked taken over: its
  // copy published, or its outcome queued at once. nullopt: the delivery is given back to the
  // broker (nack with requeue).
  void carry_out(std::uint16_t channel, std::uint64_t broker_tag,
                 std::optional<TakeOver> take_over);
  // Carries out the router's take-overs (DeliveryRouter::take_take_overs), in order.
  void carry_out_router_take_overs();
  // Moves what the proxy's channel produced: frames to the broker, notices and outcomes.
  void pump_proxy_channel();
  // The proxy's settlement of `broker_tag` is queued: a commit waiting for it may follow.
  void tx_settlement_queued(ChannelState& ch, std::uint16_t channel, std::uint64_t broker_tag);
  // The client closes a channel on which a delivery is taken over and not yet settled (its
  // copy awaits the broker's confirm): the close waits, so that the settlement goes first. Not
  // in a transaction, which the close rolls back anyway. False if it need not wait.
  bool hold_client_close(ChannelState& ch, const amqp::Frame& close);
  // Sends a held close once the channel has no taken-over delivery left, or when `overdue`.
  void release_held_close(ChannelState& ch, bool overdue = false);
  // Hands out what is held back on `ch` (DeliveryRouter::release_next), at a frame boundary;
  // a suspect waiting for the client's hands to be empty first if `even_with_others_in_hand`.
  void release_held_back(ChannelState& ch, bool even_with_others_in_hand = false);
  void release_all_held_back();
  // The steady clock for the proxy's channel: SessionOptions::steady_ms, else on_tick's.
  std::int64_t steady_ms() const { return options_.steady_ms ? options_.steady_ms() : clock_ms_; }

  // ---- a consumer's crash (session_core_end.cpp) ----
  // Its close or its connection's end found deliveries in its hands. Each is reported to the
  // observer now (on_returned), which may take it over when `can_take_over`; the channel's
  // crash_tag marks them counted. True if any was taken over: the close then waits for their
  // settlement.
  bool crash_channel(ChannelState& ch, ReturnCause cause, bool solo, bool can_take_over);
  bool crash_connection(bool can_take_over);
  // The client's connection.close, held while deliveries its crash gave up are taken over.
  bool hold_client_connection_close(const amqp::Frame& close);
  // The client went away: what it held is counted, some taken over; the broker side stays
  // open until they are settled.
  void client_gone();
  void tick_crash_holds(std::int64_t now_ms);
  // Sends a held connection.close, or ends a gone client's connection, once nothing is taken
  // over any more, or when `overdue`.
  void release_crash_holds(bool overdue);

  // ---- the connection's end (session_core_end.cpp) ----
  // connection.close (channel 0, no failing method) to `to`.
  void emit_connection_close(Side to, std::uint16_t code, std::string text);
  // Malformed or unexpected input from `offender`: close it with `code`, and the other side.
  // `failing_method` (class and method ids) goes into the close's class-id and method-id.
  void protocol_error(Side offender, std::uint16_t code, std::string text,
                      std::uint32_t failing_method = 0);
  // A method AMQP 0-9-1 does not have, from the client (amqp::is_spec_method): never
  // forwarded; the client gets connection.close 540 naming its ids, the broker a clean close.
  void reject_unknown_method(std::uint16_t channel, std::uint32_t key);
  void close_both_after_flush();
  // The broker answered the client's connection.close: closes the broker side and leaves the
  // client's socket open until the client closes it, or kClientCloseGraceMs.
  void close_broker_await_client();
  void tick_client_close(std::int64_t now_ms);
  // A client frame kept for later: its bytes reserved against the body budget. Past the
  // budget, nullptr, and the client's connection is closed (506), naming what it waited for.
  std::shared_ptr<retry::RetainedBody> reserve_kept_frame(const amqp::Frame& frame,
                                                          std::string_view waiting_for);

  // The shared state. Its parts (Session, Transactions, AckCloses) read and change it.
  SessionOptions options_;
  SessionObserver* observer_;
  SessionObserver null_observer_;
  std::array<SideIo, 2> io_;
  Phase phase_ = Phase::protocol_header;
  ChannelTable channels_;
  Handshake handshake_;          // the tuning, and the facts the handshake tells
  bool broker_closing_ = false;  // the broker sent connection.close
  ProxyClose proxy_close_ = ProxyClose::none;
  SessionStats stats_;
  // basic.deliver is decoded into this one: its strings keep their buffers between deliveries.
  amqp::BasicDeliver deliver_scratch_;
  ProxyChannel proxy_channel_;     // the proxy's own channel: copies and their confirms
  std::vector<Outcome> outcomes_;  // take-overs' outcomes waiting for deliver_outcomes
  bool delivering_outcomes_ = false;
  bool tx_replay_pending_ = false;  // some channel's frames wait for Session's replay
  std::int64_t clock_ms_ = -1;      // on_tick's last reading; -1 before the first tick
  DeliveryRouter router_;           // after what it refers to: observer_, io_, clock_ms_
  // The client's connection.close held, or the client gone, while deliveries its crash gave
  // up are taken over; then a gone client's close (session_core_end.cpp).
  ConnectionHold connection_hold_;
  // close_broker_await_client: the client's side waits for the client's close.
  bool awaiting_client_close_ = false;
  Waited client_close_waited_;
  static constexpr std::int64_t kClientCloseGraceMs = 10000;

 private:
  // The size of the first delivery that `data` holds, if it is all of `data` and handling it
  // will forward it unchanged (session_core.cpp); 0 otherwise.
  std::size_t lone_first_delivery(amqp::ByteView data);
  // Hands each queued outcome to the observer and writes the settlement it returns, once no
  // content sequence of the client's is in progress; drops those whose delivery is no longer
  // the proxy's (the broker requeues it).
  void deliver_outcomes();
  // Whether `ticket`'s delivery can be settled now, by that take-over.
  bool can_settle(const Ticket& ticket);
  // The taken-over delivery a settlement may be written for now: its channel open (or its
  // close held for it), the connection open, not settling already; nullptr otherwise.
  Delivery* settleable(std::uint16_t channel, std::uint64_t broker_tag);
  void tx_commit_written(std::uint16_t channel);
  // Cancels (no-wait) the consumers of a crashed channel whose deliveries are taken over.
  void stop_consumers(ChannelState& ch, std::uint16_t number);
  void stop_all_consumers();
  std::uint16_t number_of(const ChannelState& ch) const;
  // A delivery taken over, or a cancel-ok of stop_consumers', is still to come.
  bool close_must_wait() const;
  // Ends a gone client's connection: its channels, then the broker side with connection.close,
  // closed at the broker's close-ok (Session's handle_frame_while_proxy_closes) or
  // ConnectionHold::kGoneCloseOkMs.
  void end_gone_client();
};

}  // namespace nackguard::session
