#pragma once
// The sans-io session of one connection. Bytes from either side go in; out come the bytes to
// write to each side and whether to close it. Every frame is forwarded as its original bytes
// except:
//   - connection.tune / tune-ok: channel_max lowered by one for the client, the top channel
//     reserved for the proxy; frame_max capped by SessionOptions::max_frame_bytes;
//   - delivery tags, once the proxy has taken over a delivery on a channel: renumbered so the
//     client sees no gap, and its acks, nacks and rejects mapped back;
//   - a basic.deliver or get-ok method frame is held until its content header arrives, so the
//     observer can decide with the properties in hand.
// Malformed input ends in connection.close (501 or 505) to the side that sent it.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "proxy/session/ack_closes.hpp"
#include "proxy/session/session_core.hpp"
#include "proxy/session/tx_methods.hpp"

namespace nackguard::session {

// The dispatcher of frames: each frame to the handling its side, channel and method call for,
// over the session's core (session_core.hpp), whose state and changes the parts share.
class Session : private SessionCore {
 public:
  explicit Session(SessionOptions options = {}, SessionObserver* observer = nullptr);

  // Where to read `from`'s next bytes: straight after the partial frame kept from the last
  // read, moved to the front of a buffer of at least `buffer_bytes`, so that a frame split
  // across reads is completed in place rather than copied to be reassembled. The buffer grows
  // to hold a whole frame whose header is in (frame_max at most).
  // Valid until the next call for `from`; only the reader of `from` may use it.
  using SessionCore::input_space;
  // `n` bytes were read into input_space(from): handles the complete frames among them. The
  // last frame's bookkeeping (a forwarded delivery's body hash and unacked record) waits for
  // finish_bookkeeping(), so that the relay can send first.
  void commit_input(Side from, std::size_t n) {
    receive(from, n);
    handle_input(from);
  }
  // commit_input() in two steps, for a relay that may write first what the session will
  // forward unchanged (session_core.cpp). receive_input() takes the `n` bytes read and
  // returns the frames among them that handling is known to forward to the other side as they
  // are, ahead of anything else: one whole first delivery alone in the read, on a channel with
  // nothing held back, or nothing. The relay may write them, says how many bytes it wrote with
  // written_ahead(), then calls handle_input(), whose emit of those bytes finds them written.
  using SessionCore::receive_input;
  using SessionCore::written_ahead;
  void handle_input(Side from);
  // Does the bookkeeping commit_input() put off. Every other call does it first too, so
  // calling it is needed only before reading a channel() after commit_input().
  using SessionCore::finish_bookkeeping;
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
  using SessionCore::finished;

  // Queues whole frames for `to`, written at the next frame boundary that is not inside a
  // content sequence of any channel in that direction. The proxy's channel's frames come this
  // way.
  using SessionCore::inject;
  // Acks, nacks or rejects a delivery the proxy took over: queued (false if unknown, already
  // settling, or its channel or the connection is closing), then written at the next frame
  // boundary, or dropped if its channel or the connection closes first.
  using SessionCore::settle_taken_over;
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
  using SessionCore::reserved_channel;
  const std::string& vhost() const { return handshake_.vhost(); }
  // The broker's "version" server property from connection.start ("4.0.5"); empty if none.
  const std::string& broker_version() const { return handshake_.broker_version(); }
  // What the client calls itself (connection.start-ok: connection_name, else product and
  // version; consumer_label.hpp); empty before start-ok or when it sent none.
  const std::string& client_name() const { return handshake_.client_name(); }
  const ChannelState* channel(std::uint16_t number) const;
  const SessionStats& stats() const { return stats_; }

 private:
  void handle_client_frame(const amqp::Frame& frame);
  void handle_broker_frame(const amqp::Frame& frame);
  std::size_t process(Side from, amqp::ByteView data);
  void handle_client_connection_method(const amqp::Frame& frame, std::uint32_t key);
  void handle_broker_connection_method(const amqp::Frame& frame, std::uint32_t key);
  void handle_client_channel_method(ChannelState& ch, const amqp::Frame& frame, std::uint32_t key);
  void handle_broker_channel_method(ChannelState& ch, const amqp::Frame& frame, std::uint32_t key);
  // Content frames from the broker: a delivery's go through the delivery router.
  void handle_broker_content(ChannelState& ch, const amqp::Frame& frame);
  // In session_methods.cpp; each is false for a method that does not decode. A client's ack,
  // nack or reject, to settle_from_client:
  bool client_settlement(ChannelState& ch, const amqp::Frame& frame, std::uint32_t key);
  // basic.deliver or get-ok from the broker: a delivery begins (DeliveryRouter::begin).
  bool start_broker_delivery(ChannelState& ch, const amqp::Frame& frame, std::uint32_t key);
  void settle_from_client(ChannelState& ch, const amqp::Frame& frame, SettleKind kind,
                          std::uint64_t tag, bool multiple, bool requeue);
  bool track_client_content(ChannelState& ch, const amqp::Frame& frame);
  void handle_frame_while_proxy_closes(Side from, const amqp::Frame& frame);
  // Handles the frames that waited behind a commit now written (tx_methods.hpp).
  void replay_behind_commits();
  // Handles client frames kept for later (behind a commit, or a close), in order.
  void replay_client_frames(const amqp::Bytes& queued);
  // An ack-timeout close that ended (ack_closes.hpp): the client frames it kept are handled.
  void ack_close_ended(std::optional<ChannelState::AckClose> ended);

  TxMethods tx_{*this};
  AckCloses ack_closes_{*this};
  std::vector<Delivery> settled_scratch_;  // settle_from_client's, reused
  std::vector<const Delivery*> forwarded_scratch_;
};

}  // namespace nackguard::session
