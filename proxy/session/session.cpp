#include "proxy/session/session.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

#include "proxy/amqp/method_codec.hpp"
#include "proxy/session/ack_timeout.hpp"

namespace nackguard::session {

using amqp::ByteView;
using amqp::Frame;
using amqp::FrameType;
namespace mid = amqp::mid;
namespace reply = amqp::reply;

std::string_view to_string(Side side) {
  return side == Side::client ? "client" : "broker";
}

Session::Session(SessionOptions options, SessionObserver* observer)
    : options_(options),
      observer_(observer ? observer : &null_observer_),
      handshake_(options.max_frame_bytes),
      router_(*observer_, options_.body_budget, io(Side::client).out, clock_ms_) {
  // Before tune-ok the spec allows only frame-min-size; RabbitMQ's own handshake frames are
  // small, but clients with large property tables exist, so allow up to 128 KiB until then.
  std::uint32_t initial =
      std::clamp<std::uint32_t>(options_.max_frame_bytes, amqp::kFrameMinSize, 131072);
  for (auto& side : io_) side.decoder.set_frame_max(initial);
  io(Side::client).out.set_source(io(Side::broker).in);
  io(Side::broker).out.set_source(io(Side::client).in);
}

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

std::span<std::uint8_t> Session::input_space(Side from, std::size_t buffer_bytes) {
  finish_bookkeeping();                  // the frame it reads lies in an input buffer
  io(other(from)).out.copy_forwarded();  // the next read overwrites what it points to
  SideIo& side = io(from);
  return side.in.space(buffer_bytes, side.decoder.frame_max());
}

void Session::receive(Side from, std::size_t n) {
  SideIo& side = io(from);
  side.in.commit(n);
  side.received = n;
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

ChannelState& Session::channel_state(std::uint16_t number) {
  return channels_[number];
}

void Session::returned(const Delivery& delivery, ReturnCause cause, bool solo) {
  observer_->on_returned(delivery, cause, ReturnContext{.solo = solo, .can_take_over = false});
}

void Session::return_all(ChannelState& ch, ReturnCause cause) {
  // A recover leaves the transaction's settlements alone: they are not among the unacked.
  if (cause != ReturnCause::recover) tx_return_all(ch, cause);
  const bool solo = ch.crash_tag == 0 && ch.in_hand_tags().size() == 1;
  for (const Delivery& d : ch.take_all()) {
    if (d.no_ack) continue;
    // The client's close or crash counted what it held then (session_crash.cpp); what came
    // after, the client never saw.
    const bool after_crash = ch.crash_tag != 0 && !d.taken_over;
    if (after_crash && d.client_tag <= ch.crash_tag) continue;
    returned(d, after_crash ? ReturnCause::unseen : end_cause(ch, d, cause), solo);
  }
  std::deque<ChannelState::HeldBackDelivery> held_back = router_.take_held_back(ch);
  ch.gate.open();
  for (ChannelState::HeldBackDelivery& h : held_back) {
    if (!h.delivery.no_ack) returned(h.delivery, end_cause(ch, h.delivery, cause), false);
  }
  // A delivery cut off mid-body: the observer has seen it, and the broker requeues it.
  if (ch.incoming && !ch.incoming->header_payload.empty() && !ch.incoming->no_ack) {
    returned(*ch.incoming, end_cause(ch, *ch.incoming, cause), false);
  }
  ch.incoming.reset();
  observer_->on_returns_done();
}

void Session::end_channel(std::uint16_t number, ReturnCause cause) {
  auto it = channels_.find(number);
  if (it == channels_.end()) return;
  return_all(it->second, cause);
  channels_.erase(it);
}

void Session::end_all_channels(ReturnCause cause) {
  std::vector<std::uint16_t> numbers;
  numbers.reserve(channels_.size());
  for (const auto& [number, ch] : channels_) numbers.push_back(number);
  std::sort(numbers.begin(), numbers.end());
  for (std::uint16_t number : numbers) end_channel(number, cause);
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
  if (phase_ == Phase::open && proxy_close_ == ProxyClose::none) check_ack_timeouts(now_ms);
  clock_ms_ = now_ms;
  for (auto& [number, ch] : channels_) {
    if (ch.held_close.held()) release_held_close(ch, ch.held_close.overdue(now_ms));
  }
  tick_crash_holds(now_ms);
  tick_client_close(now_ms);
  proxy_channel_.on_tick(steady_ms());  // confirms that never came fail
  pump_proxy_channel();
}

Delivery* Session::settleable(std::uint16_t channel, std::uint64_t broker_tag) {
  auto it = channels_.find(channel);
  if (it == channels_.end() || phase_ != Phase::open || proxy_close_ != ProxyClose::none ||
      it->second.ack_close.active || (it->second.closing && !it->second.held_close.held())) {
    return nullptr;
  }
  Delivery* d = it->second.find_taken_over(broker_tag);
  return d && !d->settling ? d : nullptr;
}

bool Session::settle_taken_over(std::uint16_t channel, std::uint64_t broker_tag, SettleKind kind,
                                bool requeue) {
  finish_bookkeeping();
  Delivery* d = settleable(channel, broker_tag);
  if (!d) return false;
  auto it = channels_.find(channel);
  d->settling = true;
  amqp::Bytes frame;
  append_settlement(frame, channel, kind, broker_tag, false, requeue);
  io(Side::broker)
      .injections.push_back(
          Injection{std::move(frame), channel, Settle{channel, broker_tag, kind, requeue}});
  tx_settlement_queued(it->second, channel, broker_tag);
  flush_injections(Side::broker);
  return true;
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
  if (!stray_close_oks_.empty() && take_stray_close_ok(frame)) return;
  ChannelState& ch = channel_state(frame.channel);
  if (ch.ack_close.active) {
    client_frame_while_ack_close(ch, frame);
    return;
  }
  if (ch.tx.holds_commit()) {
    queue_behind_commit(ch, frame);
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
    broker_frame_while_ack_close(ch, frame);
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

}  // namespace nackguard::session
