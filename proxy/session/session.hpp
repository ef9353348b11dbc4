#pragma once
// The sans-io connection core. Bytes from either side go in; out come the bytes to write to
// each side and whether to close it. Every frame is forwarded as its original bytes except:
//   - connection.tune / tune-ok: channel_max lowered by one for the client, the top channel
//     reserved for the proxy; frame_max capped by SessionOptions::max_frame_bytes;
//   - delivery tags, once the proxy has taken over a delivery on a channel: renumbered so the
//     client sees no gap, and its acks, nacks and rejects mapped back;
//   - a basic.deliver or get-ok method frame is held until its content header arrives, so the
//     observer can decide with the properties in hand.
// Malformed input ends in connection.close (501 or 505) to the side that sent it.

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

class Session {
 public:
  explicit Session(SessionOptions options = {}, SessionObserver* observer = nullptr);

  // Where to read `from`'s next bytes: straight after the partial frame kept from the last
  // read, moved to the front of a buffer of at least `buffer_bytes`, so that a frame split
  // across reads is completed in place rather than copied to be reassembled. The buffer grows
  // to hold a whole frame whose header is in (frame_max at most).
  // Valid until the next call for `from`; only the reader of `from` may use it.
  std::span<std::uint8_t> input_space(Side from, std::size_t buffer_bytes);
  // `n` bytes were read into input_space(from): handles the complete frames among them. The
  // last frame's bookkeeping (a forwarded delivery's body hash and unacked record) waits for
  // finish_bookkeeping(), so that the relay can send first.
  void commit_input(Side from, std::size_t n) {
    receive(from, n);
    handle_input(from);
  }
  // commit_input() in two steps, for a relay that may write first what the session will
  // forward unchanged (session_send_ahead.cpp). receive_input() takes the `n` bytes read and
  // returns the frames among them that handling is known to forward to the other side as they
  // are, ahead of anything else: one whole first delivery alone in the read, on a channel with
  // nothing held back, or nothing. The relay may write them, says how many bytes it wrote with
  // written_ahead(), then calls handle_input(), whose emit of those bytes finds them written.
  amqp::ByteView receive_input(Side from, std::size_t n);
  void written_ahead(Side to, std::size_t n);
  void handle_input(Side from);
  // Does the bookkeeping commit_input() put off. Every other call does it first too, so
  // calling it is needed only before reading a channel() after commit_input().
  void finish_bookkeeping() {
    if (router_.has_deferred()) router_.settle_deferred();
  }
  // Bytes received from `from`, copied in: complete frames are handled, a partial one is kept.
  // For the unit tests' scripts; the relay reads into input_space() instead.
  void feed(Side from, amqp::ByteView data);
  // `side` is gone: its TCP connection closed or failed, or its heartbeats stopped.
  void on_eof(Side side);
  // Called about once a second with a monotonic time: releases deliveries held back too long,
  // closes channels past their ack timeout, and gives the observer its tick.
  void on_tick(std::int64_t now_ms);
  // The proxy closes the connection itself (shutdown): connection.close(code, text) to the
  // client, then, after its close-ok, connection.close to the broker. Deliveries the client
  // held are requeued by the broker and not counted as returns: this is not the consumer's doing.
  void close_gracefully(std::uint16_t code, std::string text);

  // Bytes to write to `side`, in order. The caller moves them out and writes them.
  amqp::Bytes& output(Side side) { return io(side).out.bytes(); }
  // Frames for `side` forwarded as they were read, still in the other side's input buffer:
  // they come before everything in output(side), which is empty while this is not. Valid
  // until the next input_space() of the other side, or output(side). A caller that writes
  // them without a copy says how many it wrote with forwarded_written().
  amqp::ByteView forwarded(Side side) const { return io(side).out.forwarded(); }
  // The first `n` bytes of forwarded(side) were written; the rest moves to output(side).
  void forwarded_written(Side side, std::size_t n) { io(side).out.forwarded_written(n); }
  // Once everything for `side` is written, its socket is to be closed.
  bool close_after_flush(Side side) const { return io(side).out.closed(); }
  // Input from `side` is no longer read (the session is closing it).
  bool input_closed(Side side) const { return io(side).input_closed; }
  bool finished() const {
    return close_after_flush(Side::client) && close_after_flush(Side::broker);
  }

  // Queues whole frames for `to`, written at the next frame boundary that is not inside a
  // content sequence of any channel in that direction. The proxy's channel's frames come this
  // way.
  void inject(Side to, amqp::Bytes frames);
  // Acks, nacks or rejects a delivery the proxy took over: queued (false if unknown, already
  // settling, or its channel or the connection is closing), then written at the next frame
  // boundary, or dropped if its channel or the connection closes first.
  bool settle_taken_over(std::uint16_t channel, std::uint64_t broker_tag, SettleKind kind,
                         bool requeue);
  // Copies published on the proxy's channel and not yet confirmed, and outcomes waiting to be
  // settled.
  std::size_t copies_outstanding() const { return proxy_channel_.outstanding() + outcomes_.size(); }

  bool is_open() const { return phase_ == Phase::open; }
  bool handshake_done() const {
    return phase_ != Phase::protocol_header && phase_ != Phase::handshake;
  }
  std::uint16_t heartbeat_seconds() const { return handshake_.tuning().heartbeat(); }
  std::uint32_t frame_max() const { return io(Side::client).decoder.frame_max(); }
  // The channel the proxy keeps for itself, once tune-ok has been seen.
  std::optional<std::uint16_t> reserved_channel() const {
    return handshake_.tuning().reserved_channel();
  }
  const std::string& vhost() const { return handshake_.vhost(); }
  // The broker's "version" server property from connection.start ("4.0.5"); empty if none.
  const std::string& broker_version() const { return handshake_.broker_version(); }
  // What the client calls itself (connection.start-ok: connection_name, else product and
  // version; consumer_label.hpp); empty before start-ok or when it sent none.
  const std::string& client_name() const { return handshake_.client_name(); }
  const ChannelState* channel(std::uint16_t number) const;
  const SessionStats& stats() const { return stats_; }

 private:
  enum class Phase { protocol_header, handshake, open, closed };

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

  void receive(Side from, std::size_t n);
  std::size_t process(Side from, amqp::ByteView data);
  // The size of the first delivery that `data` holds, if it is all of `data` and handling it
  // will forward it unchanged (session_send_ahead.cpp); 0 otherwise.
  std::size_t lone_first_delivery(amqp::ByteView data);
  void handle_client_frame(const amqp::Frame& frame);
  void handle_broker_frame(const amqp::Frame& frame);
  void handle_client_connection_method(const amqp::Frame& frame, std::uint32_t key);
  void handle_broker_connection_method(const amqp::Frame& frame, std::uint32_t key);
  void handle_client_channel_method(ChannelState& ch, const amqp::Frame& frame, std::uint32_t key);
  void handle_broker_channel_method(ChannelState& ch, const amqp::Frame& frame, std::uint32_t key);
  // Content frames from the broker: a delivery's go through the delivery router.
  void handle_broker_content(ChannelState& ch, const amqp::Frame& frame);
  // In session_channels.cpp; each is false for a method that does not decode. A client's ack,
  // nack or reject, to settle_from_client:
  bool client_settlement(ChannelState& ch, const amqp::Frame& frame, std::uint32_t key);
  // basic.deliver or get-ok from the broker: a delivery begins (DeliveryRouter::begin).
  bool start_broker_delivery(ChannelState& ch, const amqp::Frame& frame, std::uint32_t key);
  // Hands out what is held back on `ch` (DeliveryRouter::release_next), at a frame boundary;
  // a suspect waiting for the client's hands to be empty first if `even_with_others_in_hand`.
  void release_held_back(ChannelState& ch, bool even_with_others_in_hand = false);
  void release_all_held_back();
  void settle_from_client(ChannelState& ch, const amqp::Frame& frame, SettleKind kind,
                          std::uint64_t tag, bool multiple, bool requeue);
  bool track_client_content(ChannelState& ch, const amqp::Frame& frame);

  // Transactions (session_tx.cpp, transaction.hpp).
  void handle_client_tx_method(ChannelState& ch, const amqp::Frame& frame, std::uint32_t key);
  // A client frame on a channel whose commit is held: kept, in order, for later.
  void queue_behind_commit(ChannelState& ch, const amqp::Frame& frame);
  // The proxy's settlement of `broker_tag` is queued: a commit waiting for it may follow.
  void tx_settlement_queued(ChannelState& ch, std::uint16_t channel, std::uint64_t broker_tag);
  void tx_commit_written(std::uint16_t channel);
  // The broker closes the channel: a held commit is dropped, the frames behind it go on.
  void tx_abandon(ChannelState& ch);
  // The client's settlements of an open transaction at the channel's end.
  void tx_return_all(ChannelState& ch, ReturnCause cause);
  // Handles the frames that waited behind a commit now written.
  void replay_behind_commits();

  // Acknowledgement timeouts (session_timeout.cpp; their rules: ack_timeout.hpp).
  // The broker cancels a consumer of `ch` (basic.cancel): from RabbitMQ 4.3 on, a quorum
  // queue's consumer timeout, which requeues what the consumer held. Its oldest delivery is a
  // consumer_timeout return, the others are no consumer's doing. False if malformed.
  bool note_broker_cancel(ChannelState& ch, const amqp::Frame& frame);
  // The policy's ack_timeout: closes, on both sides, each channel whose oldest unacked
  // delivery was handed out longer ago than its timeout allows.
  void check_ack_timeouts(std::int64_t now_ms);
  void start_ack_close(std::uint16_t number, ChannelState& ch, const Delivery& d,
                       std::int64_t held_ms, std::int64_t timeout_ms);
  // A frame on a channel the proxy is closing (ChannelState::ack_close).
  void client_frame_while_ack_close(ChannelState& ch, const amqp::Frame& frame);
  void broker_frame_while_ack_close(ChannelState& ch, const amqp::Frame& frame);
  void finish_ack_close(std::uint16_t number);
  // A frame from `from` on a channel the proxy is closing: true if it ends that side's part,
  // its close-ok or its own close (answered with a close-ok).
  bool ends_close(Side from, const amqp::Frame& frame);
  // A client close-ok on a channel of stray_close_oks_: dropped (true). Any other frame on it
  // means none is coming.
  bool take_stray_close_ok(const amqp::Frame& frame);
  // A client frame kept for later: its bytes reserved against the body budget. Past the
  // budget, nullptr, and the client's connection is closed (506), naming what it waited for.
  std::shared_ptr<retry::RetainedBody> reserve_kept_frame(const amqp::Frame& frame,
                                                          std::string_view waiting_for);
  // Handles client frames kept for later (behind a commit, or a close), in order.
  void replay_client_frames(const amqp::Bytes& queued);

  ChannelState& channel_state(std::uint16_t number);
  // Every delivery the channel knows is given back to the broker: report each once.
  void return_all(ChannelState& ch, ReturnCause cause);
  void end_channel(std::uint16_t number, ReturnCause cause);
  void end_all_channels(ReturnCause cause);
  void returned(const Delivery& delivery, ReturnCause cause, bool solo);

  // A consumer's crash (session_crash.cpp): its close or its connection's end found deliveries
  // in its hands. Each is reported to the observer now (on_returned), which may take it over
  // when `can_take_over`; the channel's crash_tag marks them counted. True if any was taken
  // over: the close then waits for their settlement.
  bool crash_channel(ChannelState& ch, ReturnCause cause, bool solo, bool can_take_over);
  bool crash_connection(bool can_take_over);
  // Cancels (no-wait) the consumers of a crashed channel whose deliveries are taken over.
  void stop_consumers(ChannelState& ch, std::uint16_t number);
  void stop_all_consumers();
  std::uint16_t number_of(const ChannelState& ch) const;
  // A delivery taken over, or a cancel-ok of stop_consumers', is still to come.
  bool close_must_wait() const;
  // The client's connection.close, held while deliveries its crash gave up are taken over.
  bool hold_client_connection_close(const amqp::Frame& close);
  // The client went away: what it held is counted, some taken over; the broker side stays
  // open until they are settled.
  void client_gone();
  // Sends a held connection.close, or ends a gone client's connection, once nothing is taken
  // over any more, or when `overdue`.
  void release_crash_holds(bool overdue);
  void tick_crash_holds(std::int64_t now_ms);
  // Ends a gone client's connection: its channels, then the broker side with connection.close,
  // closed at the broker's close-ok (handle_frame_while_proxy_closes) or
  // ConnectionHold::kGoneCloseOkMs.
  void end_gone_client();

  void emit(Side to, amqp::ByteView bytes) { io(to).out.emit(bytes); }
  // Carries out the observer's TakeOver of a delivery the session has marked taken over
  // (session_output.cpp): its copy published, or its outcome queued at once. nullopt: the
  // delivery is given back to the broker (nack with requeue).
  void carry_out(std::uint16_t channel, std::uint64_t broker_tag,
                 std::optional<TakeOver> take_over);
  // Carries out the router's take-overs (DeliveryRouter::take_take_overs), in order.
  void carry_out_router_take_overs();
  // Moves what the proxy's channel produced: frames to the broker, notices and outcomes.
  void pump_proxy_channel();
  // Hands each queued outcome to the observer and writes the settlement it returns, once no
  // content sequence of the client's is in progress; drops those whose delivery is no longer
  // the proxy's (the broker requeues it).
  void deliver_outcomes();
  // Whether `ticket`'s delivery can be settled now, by that take-over.
  bool can_settle(const Ticket& ticket);
  // The taken-over delivery a settlement may be written for now: its channel open (or its
  // close held for it), the connection open, not settling already; nullptr otherwise.
  Delivery* settleable(std::uint16_t channel, std::uint64_t broker_tag);
  // The steady clock for the proxy's channel: SessionOptions::steady_ms, else on_tick's.
  std::int64_t steady_ms() const { return options_.steady_ms ? options_.steady_ms() : clock_ms_; }
  // connection.close (channel 0, no failing method) to `to`.
  void emit_connection_close(Side to, std::uint16_t code, std::string text);
  void flush_injections(Side to);
  // Drops queued injections for a channel that is closing: the broker requeues what they
  // would have settled, and frames on a closed channel would be a connection error.
  void drop_injections(std::uint16_t channel);
  // Drops every injection queued for `to`: the connection is ending.
  void drop_all_injections(Side to);
  // The client closes a channel on which a delivery is taken over and not yet settled (its
  // copy awaits the broker's confirm): the close waits, so that the settlement goes first. Not
  // in a transaction, which the close rolls back anyway. False if it need not wait.
  bool hold_client_close(ChannelState& ch, const amqp::Frame& close);
  // Sends a held close once the channel has no taken-over delivery left, or when `overdue`.
  void release_held_close(ChannelState& ch, bool overdue = false);
  bool content_in_progress(Side to) const;
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
  static constexpr std::int64_t kClientCloseGraceMs = 10000;
  void handle_frame_while_proxy_closes(Side from, const amqp::Frame& frame);

  SessionOptions options_;
  SessionObserver* observer_;
  SessionObserver null_observer_;
  std::array<SideIo, 2> io_;
  Phase phase_ = Phase::protocol_header;
  ChannelTable channels_;
  Handshake handshake_;          // the tuning, and the facts the handshake tells
  bool broker_closing_ = false;  // the broker sent connection.close (session_connection.cpp)
  enum class ProxyClose { none, awaiting_client, awaiting_broker };
  ProxyClose proxy_close_ = ProxyClose::none;
  SessionStats stats_;
  std::vector<Delivery> settled_scratch_;  // settle_from_client's, reused
  std::vector<const Delivery*> forwarded_scratch_;
  // basic.deliver is decoded into this one: its strings keep their buffers between deliveries.
  amqp::BasicDeliver deliver_scratch_;
  ProxyChannel proxy_channel_;     // the proxy's own channel: copies and their confirms
  std::vector<Outcome> outcomes_;  // take-overs' outcomes waiting for deliver_outcomes
  bool delivering_outcomes_ = false;
  bool tx_replay_pending_ = false;  // some channel's frames wait for replay_behind_commits
  std::int64_t clock_ms_ = -1;      // on_tick's last reading; -1 before the first tick
  DeliveryRouter router_;           // after what it refers to: observer_, io_, clock_ms_
  // Channels on which the client closed while the proxy's ack-timeout close crossed it: the
  // client's close-ok for the proxy's close is still to come, and is not forwarded.
  std::vector<std::uint16_t> stray_close_oks_;
  // The client's connection.close held, or the client gone, while deliveries its crash gave
  // up are taken over; then a gone client's close (session_crash.cpp).
  ConnectionHold connection_hold_;
  // close_broker_await_client: since when the client's side waits for the client's close.
  bool awaiting_client_close_ = false;
  std::int64_t client_close_since_ms_ = -1;
};

}  // namespace nackguard::session
