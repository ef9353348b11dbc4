// The connection's methods: the handshake's tune and tune-ok rewritten (tuning.hpp), and what
// the session keeps of the rest (the vhost, the broker's version, the client's name), and the
// connection's end (session.hpp).

#include "proxy/amqp/method_codec.hpp"
#include "proxy/session/consumer_label.hpp"
#include "proxy/session/session.hpp"

namespace nackguard::session {

using amqp::Frame;
namespace mid = amqp::mid;
namespace reply = amqp::reply;

void Session::handle_client_connection_method(const Frame& frame, std::uint32_t key) {
  switch (key) {
    case mid::connection_tune_ok: {
      amqp::ConnectionTuneOk tune;
      if (amqp::decode_method(frame.payload, tune) != amqp::MethodError::none) {
        protocol_error(Side::client, reply::frame_error, "FRAME_ERROR - malformed tune-ok");
        return;
      }
      amqp::ConnectionTuneOk to_broker = tuning_.answer(tune);
      for (auto& side : io_) side.decoder.set_frame_max(tuning_.frame_max());
      amqp::Bytes out;
      amqp::append_fixed_method_frame(out, 0, to_broker);
      emit(Side::broker, out);
      return;
    }
    case mid::connection_start_ok: {
      // Forwarded as it is (credentials included); only the client's name is kept, for the
      // dead-letters' x-nackguard-consumer. A start-ok that does not decode is the broker's
      // to refuse.
      amqp::ConnectionStartOk start_ok;
      if (amqp::decode_method(frame.payload, start_ok) == amqp::MethodError::none) {
        client_name_ = nackguard::session::client_name(start_ok.client_properties);
      }
      break;
    }
    case mid::connection_open: {
      amqp::ConnectionOpen open;
      if (amqp::decode_method(frame.payload, open) != amqp::MethodError::none) {
        protocol_error(Side::client, reply::frame_error, "FRAME_ERROR - malformed connection.open");
        return;
      }
      vhost_ = open.virtual_host;
      break;
    }
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
    case mid::connection_start: {
      // Forwarded as it is; only the broker's version is kept (a quorum queue's default
      // delivery limit depends on it).
      amqp::ConnectionStart start;
      if (amqp::decode_method(frame.payload, start) == amqp::MethodError::none) {
        const amqp::FieldValue* version = start.server_properties.find("version");
        const std::string* text = version ? version->as_string() : nullptr;
        if (text) broker_version_ = text->substr(0, 64);
      }
      emit(Side::client, frame.raw);
      return;
    }
    case mid::connection_tune: {
      amqp::ConnectionTune tune;
      if (amqp::decode_method(frame.payload, tune) != amqp::MethodError::none) {
        protocol_error(Side::broker, reply::frame_error, "FRAME_ERROR - malformed tune");
        return;
      }
      amqp::Bytes out;
      amqp::append_fixed_method_frame(out, 0, tuning_.offer(tune));
      emit(Side::client, out);
      return;
    }
    case mid::connection_open_ok:
      phase_ = Phase::open;
      emit(Side::client, frame.raw);
      proxy_channel_.configure(tuning_.reserved_channel(), frame_max());
      observer_->on_open(
          {vhost_, tuning_.reserved_channel(), frame_max(), broker_version_, client_name_});
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
