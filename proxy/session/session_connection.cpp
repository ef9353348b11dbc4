// The connection's methods: the handshake (handshake.hpp: the tune and tune-ok rewritten, the
// vhost, the broker's version and the client's name kept) and the connection's close.

#include "proxy/amqp/method_codec.hpp"
#include "proxy/session/session.hpp"

namespace nackguard::session {

using amqp::Frame;
namespace mid = amqp::mid;
namespace reply = amqp::reply;

void Session::handle_client_connection_method(const Frame& frame, std::uint32_t key) {
  switch (key) {
    case mid::connection_tune_ok: {
      std::optional<amqp::Bytes> to_broker = handshake_.client_tune_ok(frame);
      if (!to_broker) {
        protocol_error(Side::client, reply::frame_error, "FRAME_ERROR - malformed tune-ok");
        return;
      }
      for (auto& side : io_) side.decoder.set_frame_max(handshake_.tuning().frame_max());
      emit(Side::broker, *to_broker);
      return;
    }
    case mid::connection_start_ok:
      // Forwarded as it is (credentials included); only the client's name is kept.
      handshake_.client_start_ok(frame);
      break;
    case mid::connection_open:
      if (!handshake_.client_open(frame)) {
        protocol_error(Side::client, reply::frame_error, "FRAME_ERROR - malformed connection.open");
        return;
      }
      break;
    case mid::connection_close:
      if (phase_ == Phase::open && hold_client_connection_close(frame)) return;
      break;
    case mid::connection_close_ok:
      // The client answers the broker's connection.close: the broker ended it.
      emit(Side::broker, frame.raw);
      end_all_channels(ReturnCause::broker_lost);
      close_both_after_flush();
      return;
    default:
      if (!amqp::is_spec_method(key)) return reject_unknown_method(frame.channel, key);
      break;
  }
  emit(Side::broker, frame.raw);
}

void Session::handle_broker_connection_method(const Frame& frame, std::uint32_t key) {
  switch (key) {
    case mid::connection_start:
      // Forwarded as it is; only the broker's version is kept.
      handshake_.broker_start(frame);
      emit(Side::client, frame.raw);
      return;
    case mid::connection_tune: {
      std::optional<amqp::Bytes> to_client = handshake_.broker_tune(frame);
      if (!to_client) {
        protocol_error(Side::broker, reply::frame_error, "FRAME_ERROR - malformed tune");
        return;
      }
      emit(Side::client, *to_client);
      return;
    }
    case mid::connection_open_ok:
      phase_ = Phase::open;
      emit(Side::client, frame.raw);
      proxy_channel_.configure(reserved_channel(), frame_max());
      observer_->on_open(handshake_.facts(frame_max()));
      return;
    case mid::connection_close:
      // The broker ends the connection: it answers nothing more but its close-ok (no cancel-ok
      // for a crash's cancels, no confirm), and requeues what the client held.
      broker_closing_ = true;
      emit(Side::client, frame.raw);
      return;
    case mid::connection_close_ok:
      // The client's connection.close, answered: the broker side is done; the client's socket
      // is the client's to close, as RabbitMQ leaves it (session_close.cpp).
      emit(Side::client, frame.raw);
      end_all_channels(ReturnCause::connection_closed);
      close_broker_await_client();
      return;
    default:
      emit(Side::client, frame.raw);
      return;
  }
}

}  // namespace nackguard::session
