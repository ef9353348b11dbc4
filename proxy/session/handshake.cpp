#include "proxy/session/handshake.hpp"

#include "proxy/amqp/method_codec.hpp"
#include "proxy/session/consumer_label.hpp"

namespace nackguard::session {

void Handshake::broker_start(const amqp::Frame& frame) {
  amqp::ConnectionStart start;
  if (amqp::decode_method(frame.payload, start) != amqp::MethodError::none) return;
  const amqp::FieldValue* version = start.server_properties.find("version");
  const std::string* text = version ? version->as_string() : nullptr;
  if (text) broker_version_ = text->substr(0, 64);
}

void Handshake::client_start_ok(const amqp::Frame& frame) {
  amqp::ConnectionStartOk start_ok;
  if (amqp::decode_method(frame.payload, start_ok) != amqp::MethodError::none) return;
  client_name_ = session::client_name(start_ok.client_properties);
}

bool Handshake::client_open(const amqp::Frame& frame) {
  amqp::ConnectionOpen open;
  if (amqp::decode_method(frame.payload, open) != amqp::MethodError::none) return false;
  vhost_ = open.virtual_host;
  return true;
}

std::optional<amqp::Bytes> Handshake::broker_tune(const amqp::Frame& frame) {
  amqp::ConnectionTune tune;
  if (amqp::decode_method(frame.payload, tune) != amqp::MethodError::none) return std::nullopt;
  amqp::Bytes out;
  amqp::append_fixed_method_frame(out, 0, tuning_.offer(tune));
  return out;
}

std::optional<amqp::Bytes> Handshake::client_tune_ok(const amqp::Frame& frame) {
  amqp::ConnectionTuneOk tune;
  if (amqp::decode_method(frame.payload, tune) != amqp::MethodError::none) return std::nullopt;
  amqp::Bytes out;
  amqp::append_fixed_method_frame(out, 0, tuning_.answer(tune));
  return out;
}

}  // namespace nackguard::session
