// How a connection ends: the proxy's own close at shutdown, a protocol error from either side,
// a client's unknown method, a side's EOF. Each ends every channel, reporting what goes back to
// the broker, and closes both sides once their output is written.

#include "proxy/amqp/method_codec.hpp"
#include "proxy/session/session.hpp"

namespace nackguard::session {

using amqp::Frame;
using amqp::FrameType;
namespace mid = amqp::mid;
namespace reply = amqp::reply;

void Session::emit_connection_close(Side to, std::uint16_t code, std::string text) {
  amqp::ConnectionClose close;
  close.reply_code = code;
  close.reply_text = std::move(text);
  amqp::Bytes frame;
  amqp::append_close_frame(frame, 0, close);
  emit(to, frame);
}

void Session::close_both_after_flush() {
  awaiting_client_close_ = false;
  for (auto& side : io_) {
    side.out.close();
    side.input_closed = true;
  }
  drop_all_injections(Side::client);
  drop_all_injections(Side::broker);
  phase_ = Phase::closed;
}

void Session::close_broker_await_client() {
  SideIo& broker = io(Side::broker);
  broker.out.close();
  broker.input_closed = true;
  drop_all_injections(Side::broker);
  phase_ = Phase::closed;
  // What the client sends now is dropped (process()); its EOF closes its side (on_eof), or
  // kClientCloseGraceMs do (on_tick). Closed at once, the socket would end under a client
  // that reads its close-ok while it closes: the Go client took that EOF for an error.
  client_close_since_ms_ = clock_ms_;
  awaiting_client_close_ = true;
}

void Session::tick_client_close(std::int64_t now_ms) {
  if (!awaiting_client_close_) return;
  if (client_close_since_ms_ < 0) client_close_since_ms_ = now_ms;
  if (now_ms - client_close_since_ms_ < kClientCloseGraceMs) return;
  awaiting_client_close_ = false;
  io(Side::client).out.close();
  io(Side::client).input_closed = true;
}

void Session::protocol_error(Side offender, std::uint16_t code, std::string text,
                             std::uint32_t failing_method) {
  if (phase_ == Phase::closed && finished()) return;
  bool was_open = phase_ == Phase::open;
  amqp::ConnectionClose close;
  close.reply_code = code;
  close.reply_text = std::move(text);
  close.class_id = static_cast<std::uint16_t>(failing_method >> 16);
  close.method_id = static_cast<std::uint16_t>(failing_method & 0xFFFF);
  amqp::Bytes frame;
  amqp::append_close_frame(frame, 0, close);
  emit(offender, frame);
  if (offender == Side::broker && was_open) {
    emit_connection_close(Side::client, reply::connection_forced,
                          "CONNECTION_FORCED - nackguard: the broker sent invalid data");
  }
  // What the client held is counted as a crash, the connection being one deliveries.
  if (offender == Side::client) crash_connection(false);
  end_all_channels(offender == Side::broker ? ReturnCause::broker_lost
                                            : ReturnCause::connection_closed);
  close_both_after_flush();
}

void Session::reject_unknown_method(std::uint16_t channel, std::uint32_t key) {
  std::string ids =
      "class " + std::to_string(key >> 16) + ", method " + std::to_string(key & 0xFFFF);
  if (phase_ == Phase::open) {
    // Forwarded, such a method crashes RabbitMQ 3.10's connection process (the client then
    // gets 320 with no cause). The broker gets the close a client sends, then the socket ends.
    emit_connection_close(
        Side::broker, reply::success,
        "nackguard: the client sent a method AMQP 0-9-1 does not have (" + ids + ")");
  }
  protocol_error(Side::client, reply::not_implemented,
                 "NOT_IMPLEMENTED - nackguard: unknown method (" + ids + ") on channel " +
                     std::to_string(channel) + "; AMQP 0-9-1 has no such method",
                 key);
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
    // What it held is counted as a crash (session_crash.cpp); the broker side stays open while
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

}  // namespace nackguard::session
