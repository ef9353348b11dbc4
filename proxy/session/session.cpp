#include "proxy/session/session.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

#include "proxy/amqp/method_codec.hpp"

namespace nackguard::session {

using amqp::ByteView;
using amqp::Frame;
using amqp::FrameType;
namespace mid = amqp::mid;
namespace reply = amqp::reply;

Session::Session(SessionOptions options, SessionObserver* observer)
    : SessionCore(std::move(options), observer) {}

const ChannelState* Session::channel(std::uint16_t number) const {
  auto it = channels_.find(number);
  return it == channels_.end() ? nullptr : &it->second;
}

void Session::feed(Side from, ByteView data) {
  SideIo& in = io(from);
  if (in.input_closed || data.empty()) return;
  if (in.in.empty()) {
    // Nothing kept from before: handle the frames where they are, keep only the remainder.
    data = data.subspan(process(from, data));
    finish_bookkeeping();  // before `data` is gone
    if (in.input_closed || data.empty()) return;
  }
  std::span<std::uint8_t> space = input_space(from, in.in.pending().size() + data.size());
  std::memcpy(space.data(), data.data(), data.size());
  commit_input(from, data.size());
  finish_bookkeeping();
}

void Session::handle_input(Side from) {
  SideIo& side = io(from);
  InputBuffer& in = side.in;
  if (!side.input_closed && side.received > 0) in.consume(process(from, in.pending()));
  side.received = 0;
  if (side.input_closed || in.empty()) in.clear();
  if (io(other(from)).out.ahead_missed()) {
    protocol_error(Side::broker, reply::internal_error,
                   "INTERNAL_ERROR - nackguard wrote frames ahead that it then handled otherwise");
  }
}

std::size_t Session::process(Side from, ByteView data) {
  SideIo& in = io(from);
  std::size_t used = 0;
  // After the connection's close-ok (close_broker_await_client): nothing more is handled.
  if (phase_ == Phase::closed) return data.size();
  router_.next_pass();
  if (tx_replay_pending_) replay_behind_commits();
  if (from == Side::client && phase_ == Phase::protocol_header) {
    switch (amqp::check_protocol_header(data)) {
      case amqp::HeaderCheck::need_more:
        return 0;
      case amqp::HeaderCheck::bad:
        // What a broker does with a version it does not speak: name its own, then close.
        emit(Side::client, ByteView(amqp::kProtocolHeader));
        in.input_closed = true;
        close_both_after_flush();
        return data.size();
      case amqp::HeaderCheck::ok:
        emit(Side::broker, data.first(amqp::kProtocolHeaderSize));
        used = amqp::kProtocolHeaderSize;
        phase_ = Phase::handshake;
        break;
    }
  }
  while (!in.input_closed) {
    amqp::FrameResult result = in.decoder.decode(data.subspan(used));
    if (result.status == amqp::FrameResult::Status::need_more) break;
    finish_bookkeeping();  // the last frame's, before the next is handled
    if (result.status == amqp::FrameResult::Status::error) {
      protocol_error(from, reply::frame_error,
                     "FRAME_ERROR - " + std::string(amqp::to_string(result.error)));
      break;
    }
    const Frame& frame = result.frame;
    stats_.frames[static_cast<int>(from)] += 1;
    stats_.bytes[static_cast<int>(from)] += frame.raw.size();
    used += frame.raw.size();
    if (proxy_close_ != ProxyClose::none) {
      handle_frame_while_proxy_closes(from, frame);
    } else if (from == Side::client) {
      handle_client_frame(frame);
    } else {
      handle_broker_frame(frame);
    }
  }
  if (tx_replay_pending_) {
    finish_bookkeeping();
    replay_behind_commits();
  }
  return used;
}

void Session::on_tick(std::int64_t now_ms) {
  finish_bookkeeping();
  if (tx_replay_pending_) replay_behind_commits();
  for (auto& [number, ch] : channels_) {
    // Deliveries held back behind a suspect the client holds, or a suspect waiting for the
    // client's other deliveries: both for suspect_hold_ms at most. A client that sits on what
    // it holds (a batch) gets the next one even if it is a suspect.
    const bool waiting = (ch.gate.closed() || ch.suspect_waits()) && !ch.held_back.empty();
    if (!ch.gate.overdue(now_ms, options_.suspect_hold_ms, waiting)) continue;
    release_held_back(ch, true);
    ch.gate.waited_again(now_ms, !ch.held_back.empty());
  }
  if (phase_ == Phase::open && proxy_close_ == ProxyClose::none) ack_closes_.check(now_ms);
  clock_ms_ = now_ms;
  for (auto& [number, ch] : channels_) {
    if (ch.held_close.held()) release_held_close(ch, ch.held_close.overdue(now_ms));
  }
  tick_crash_holds(now_ms);
  tick_client_close(now_ms);
  proxy_channel_.on_tick(steady_ms());  // confirms that never came fail
  pump_proxy_channel();
}

void Session::on_eof(Side side) {
  finish_bookkeeping();
  io(side).input_closed = true;
  if (proxy_close_ != ProxyClose::none) {
    channels_.clear();  // shutdown: not returns
    router_.forget_channels();
  }
  if (phase_ == Phase::closed) {
    io(side).out.close();
    if (side == Side::client) awaiting_client_close_ = false;
    return;
  }
  if (side == Side::broker && phase_ == Phase::open) {
    emit_connection_close(Side::client, reply::connection_forced,
                          "CONNECTION_FORCED - nackguard: the broker connection was lost");
  }
  if (side == Side::client && phase_ == Phase::open) {
    // What it held is counted as a crash (session_core_end.cpp); the broker side stays open while
    // deliveries it gave up are taken over.
    if (!connection_hold_.gone()) client_gone();
    return;
  }
  connection_hold_.drop();
  end_all_channels(side == Side::broker ? ReturnCause::broker_lost
                                        : ReturnCause::connection_closed);
  close_both_after_flush();
}

void Session::close_gracefully(std::uint16_t code, std::string text) {
  finish_bookkeeping();
  if (proxy_close_ != ProxyClose::none || phase_ == Phase::closed) return;
  if (phase_ != Phase::open) {
    close_both_after_flush();
    return;
  }
  emit_connection_close(Side::client, code, std::move(text));
  proxy_close_ = ProxyClose::awaiting_client;
}

void Session::handle_frame_while_proxy_closes(Side from, const Frame& frame) {
  // After sending connection.close only close and close-ok count (the spec's rule); frames
  // for the client are no longer sent.
  if (frame.channel == 0 && frame.frame_type() == FrameType::method) {
    std::optional<std::uint32_t> key = amqp::peek_method_key(frame.payload);
    bool closing = key && (*key == mid::connection_close_ok || *key == mid::connection_close);
    if (from == Side::client && closing && proxy_close_ == ProxyClose::awaiting_client) {
      io(Side::client).input_closed = true;
      io(Side::client).out.close();
      emit_connection_close(Side::broker, reply::success,
                            "nackguard: the client connection was closed at shutdown");
      proxy_close_ = ProxyClose::awaiting_broker;
      return;
    }
    if (from == Side::broker && closing) {
      channels_.clear();  // requeued by the broker; not returns
      router_.forget_channels();
      close_both_after_flush();
      return;
    }
  }
  if (from == Side::broker && reserved_channel() && frame.channel == *reserved_channel()) {
    proxy_channel_.on_frame(frame, steady_ms());
    pump_proxy_channel();
  }
}

// ---- frames from the client ----

void Session::handle_client_frame(const Frame& frame) {
  if (frame.frame_type() == FrameType::heartbeat) {
    emit(Side::broker, frame.raw);
    return;
  }
  if (frame.channel == 0) {
    if (frame.frame_type() != FrameType::method) {
      protocol_error(Side::client, reply::unexpected_frame,
                     "UNEXPECTED_FRAME - content frame on channel 0");
      return;
    }
    std::optional<std::uint32_t> key = amqp::peek_method_key(frame.payload);
    if (!key) {
      protocol_error(Side::client, reply::frame_error, "FRAME_ERROR - method frame too short");
      return;
    }
    handle_client_connection_method(frame, *key);
    return;
  }
  if (reserved_channel() && frame.channel == *reserved_channel()) {
    protocol_error(Side::client, reply::channel_error,
                   "CHANNEL_ERROR - channel " + std::to_string(frame.channel) +
                       " is above the negotiated channel_max");
    return;
  }
  if (ack_closes_.awaits_stray_close_ok() && ack_closes_.take_stray_close_ok(frame)) return;
  ChannelState& ch = channel_state(frame.channel);
  if (ch.ack_close.active) {
    ack_close_ended(ack_closes_.client_frame(ch, frame));
    return;
  }
  if (ch.tx.holds_commit()) {
    tx_.queue_behind_commit(ch, frame);
    return;
  }
  if (frame.frame_type() != FrameType::method) {
    if (track_client_content(ch, frame)) {
      emit(Side::broker, frame.raw);
      flush_injections(Side::broker);
    }
    return;
  }
  if (ch.from_client.in_progress()) {
    protocol_error(
        Side::client, reply::unexpected_frame,
        "UNEXPECTED_FRAME - expected a content frame on channel " + std::to_string(frame.channel));
    return;
  }
  std::optional<std::uint32_t> key = amqp::peek_method_key(frame.payload);
  if (!key) {
    protocol_error(Side::client, reply::frame_error, "FRAME_ERROR - method frame too short");
    return;
  }
  handle_client_channel_method(ch, frame, *key);
}

bool Session::track_client_content(ChannelState& ch, const Frame& frame) {
  if (ch.from_client.take(frame)) return true;
  protocol_error(Side::client, reply::unexpected_frame,
                 (frame.frame_type() == FrameType::header
                      ? "UNEXPECTED_FRAME - content header without a publish on channel "
                      : "UNEXPECTED_FRAME - content body beyond the announced size on channel ") +
                     std::to_string(frame.channel));
  return false;
}

// ---- frames from the broker ----

void Session::handle_broker_frame(const Frame& frame) {
  if (frame.frame_type() == FrameType::heartbeat) {
    emit(Side::client, frame.raw);
    return;
  }
  if (reserved_channel() && frame.channel == *reserved_channel()) {
    proxy_channel_.on_frame(frame, steady_ms());
    pump_proxy_channel();
    return;
  }
  if (frame.channel == 0) {
    std::optional<std::uint32_t> key = amqp::peek_method_key(frame.payload);
    if (frame.frame_type() != FrameType::method || !key) {
      protocol_error(Side::broker, reply::frame_error,
                     "FRAME_ERROR - nackguard expected a method frame on channel 0");
      return;
    }
    handle_broker_connection_method(frame, *key);
    return;
  }
  ChannelState& ch = channel_state(frame.channel);
  if (ch.ack_close.active) {
    ack_close_ended(ack_closes_.broker_frame(ch, frame));
    return;
  }
  if (frame.frame_type() != FrameType::method) {
    handle_broker_content(ch, frame);
    return;
  }
  if (ch.from_broker.in_progress()) {
    protocol_error(Side::broker, reply::unexpected_frame,
                   "UNEXPECTED_FRAME - nackguard expected a content frame on channel " +
                       std::to_string(frame.channel));
    return;
  }
  std::optional<std::uint32_t> key = amqp::peek_method_key(frame.payload);
  if (!key) {
    protocol_error(Side::broker, reply::frame_error, "FRAME_ERROR - method frame too short");
    return;
  }
  handle_broker_channel_method(ch, frame, *key);
}

// ---- client frames kept for later ----

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

void Session::ack_close_ended(std::optional<ChannelState::AckClose> ended) {
  if (ended) replay_client_frames(ended->queued);  // its reservations held until then
}

}  // namespace nackguard::session
