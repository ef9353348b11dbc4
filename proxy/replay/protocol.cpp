#include "proxy/replay/protocol.hpp"

#include <algorithm>

#include "proxy/amqp/method_codec.hpp"

namespace nackguard::replay {

namespace {

using amqp::FieldTable;
using amqp::FieldValue;

FieldTable client_properties(const std::string& version) {
  FieldTable capabilities;
  capabilities.set("authentication_failure_close", FieldValue::boolean(true));
  capabilities.set("publisher_confirms", FieldValue::boolean(true));
  capabilities.set("basic.nack", FieldValue::boolean(true));
  capabilities.set("connection.blocked", FieldValue::boolean(true));
  FieldTable properties;
  properties.set("product", FieldValue::string("nackguard replay"));
  if (!version.empty()) properties.set("version", FieldValue::string(version));
  properties.set("platform", FieldValue::string("C++"));
  properties.set("connection_name", FieldValue::string("nackguard replay"));
  properties.set("capabilities", FieldValue::table(std::move(capabilities)));
  return properties;
}

bool offers_plain(const std::string& mechanisms) {
  std::size_t pos = 0;
  while (pos < mechanisms.size()) {
    std::size_t end = mechanisms.find(' ', pos);
    if (end == std::string::npos) end = mechanisms.size();
    if (mechanisms.compare(pos, end - pos, "PLAIN") == 0) return true;
    pos = end + 1;
  }
  return false;
}

}  // namespace

std::string describe_method(std::uint32_t key) {
  return std::to_string(key >> 16) + "." + std::to_string(key & 0xFFFF);
}

std::string describe_reply(std::uint16_t code, const std::string& text) {
  return std::to_string(code) + " " + text;
}

std::string Handshake::plain_response(const std::string& user, const std::string& password) {
  std::string response;
  response += '\0';
  response += user;
  response += '\0';
  response += password;
  return response;
}

Tuning Handshake::negotiate(const amqp::ConnectionTune& offer, std::uint16_t max_heartbeat,
                            std::uint32_t max_frame) {
  Tuning tuning;
  tuning.channel_max = offer.channel_max == 0 ? kChannel : std::min(offer.channel_max, kChannel);
  tuning.frame_max = offer.frame_max == 0 ? max_frame : std::min(offer.frame_max, max_frame);
  tuning.heartbeat = offer.heartbeat == 0 ? 0 : std::min(offer.heartbeat, max_heartbeat);
  return tuning;
}

void Handshake::begin(amqp::Bytes& out) const {
  out.insert(out.end(), std::begin(amqp::kProtocolHeader), std::end(amqp::kProtocolHeader));
}

void Handshake::fail(std::string why) {
  state_ = State::failed;
  error_ = std::move(why);
}

void Handshake::on_frame(const amqp::Frame& frame, amqp::Bytes& out) {
  if (state_ == State::done || state_ == State::failed) return;
  if (frame.frame_type() == amqp::FrameType::heartbeat) return;
  if (frame.frame_type() != amqp::FrameType::method || frame.channel != 0) {
    return fail(params_.endpoint + " sent an unexpected frame during the AMQP handshake");
  }
  std::optional<std::uint32_t> key = amqp::peek_method_key(frame.payload);
  if (key == amqp::mid::connection_close) return on_close(frame, out);
  if (state_ == State::awaiting_start && key == amqp::mid::connection_start) {
    return on_start(frame, out);
  }
  if (state_ == State::awaiting_tune && key == amqp::mid::connection_secure) {
    return fail(params_.endpoint + " asked for a SASL challenge; only PLAIN is supported");
  }
  if (state_ == State::awaiting_tune && key == amqp::mid::connection_tune) {
    return on_tune(frame, out);
  }
  if (state_ == State::awaiting_open_ok && key == amqp::mid::connection_open_ok) {
    state_ = State::done;
    return;
  }
  fail(params_.endpoint + " sent method " + (key ? describe_method(*key) : "(truncated)") +
       " out of order during the AMQP handshake");
}

void Handshake::on_start(const amqp::Frame& frame, amqp::Bytes& out) {
  amqp::ConnectionStart start;
  if (amqp::decode_method(frame.payload, start) != amqp::MethodError::none) {
    return fail(params_.endpoint + " sent a malformed connection.start");
  }
  if (start.version_major != 0 || start.version_minor != 9) {
    return fail(params_.endpoint + " speaks AMQP " + std::to_string(start.version_major) + "-" +
                std::to_string(start.version_minor) + ", not 0-9-1");
  }
  if (!offers_plain(start.mechanisms)) {
    return fail(params_.endpoint + " does not offer SASL PLAIN (it offers: " + start.mechanisms +
                ")");
  }
  amqp::ConnectionStartOk ok;
  ok.client_properties = client_properties(params_.version);
  ok.mechanism = "PLAIN";
  ok.response = plain_response(params_.user, params_.password);
  ok.locale = "en_US";
  if (!amqp::append_method_frame(out, 0, ok)) {
    return fail("the user name or password is too long for connection.start-ok");
  }
  state_ = State::awaiting_tune;
}

void Handshake::on_tune(const amqp::Frame& frame, amqp::Bytes& out) {
  amqp::ConnectionTune offer;
  if (amqp::decode_method(frame.payload, offer) != amqp::MethodError::none) {
    return fail(params_.endpoint + " sent a malformed connection.tune");
  }
  tuning_ = negotiate(offer, params_.max_heartbeat, params_.max_frame);
  if (tuning_.frame_max < amqp::kFrameMinSize) {
    return fail(params_.endpoint + " offers frame_max " + std::to_string(tuning_.frame_max) +
                ", below AMQP's minimum of 4096");
  }
  amqp::ConnectionTuneOk tune_ok;
  tune_ok.channel_max = tuning_.channel_max;
  tune_ok.frame_max = tuning_.frame_max;
  tune_ok.heartbeat = tuning_.heartbeat;
  amqp::ConnectionOpen open;
  open.virtual_host = params_.vhost;
  if (!amqp::append_method_frame(out, 0, tune_ok) || !amqp::append_method_frame(out, 0, open)) {
    return fail("the vhost name is longer than 255 bytes");
  }
  state_ = State::awaiting_open_ok;
}

void Handshake::on_close(const amqp::Frame& frame, amqp::Bytes& out) {
  amqp::ConnectionClose close;
  if (amqp::decode_method(frame.payload, close) != amqp::MethodError::none) {
    return fail(params_.endpoint + " sent a malformed connection.close");
  }
  amqp::append_fixed_method_frame(out, 0, amqp::ConnectionCloseOk{});
  close_code_ = close.reply_code;
  std::string reply = describe_reply(close.reply_code, close.reply_text);
  if (close.reply_code == 403 && state_ == State::awaiting_tune) {
    return fail(params_.endpoint + " refused the login of user '" + params_.user +
                "': check the user name and password (" + reply + ")");
  }
  if (state_ == State::awaiting_open_ok) {
    return fail(params_.endpoint + " refused vhost '" + params_.vhost + "' for user '" +
                params_.user + "' (" + reply + ")");
  }
  fail(params_.endpoint + " closed the connection during the AMQP handshake (" + reply + ")");
}

InboundAssembler::Result InboundAssembler::on_frame(const amqp::Frame& frame) {
  Result result;
  switch (frame.frame_type()) {
    case amqp::FrameType::heartbeat:
      result.unit.emplace().kind = Inbound::Kind::heartbeat;
      return result;
    case amqp::FrameType::method: {
      if (pending_) {
        result.error = "a method frame arrived inside a message's content frames";
        return result;
      }
      std::optional<std::uint32_t> key = amqp::peek_method_key(frame.payload);
      if (!key) {
        result.error = "a method frame is too short to name its method";
        return result;
      }
      Inbound unit;
      unit.channel = frame.channel;
      unit.method_key = *key;
      unit.method.assign(frame.payload.begin(), frame.payload.end());
      if (amqp::carries_content(*key)) {
        unit.kind = Inbound::Kind::content;
        pending_ = std::move(unit);
        have_header_ = false;
      } else {
        result.unit = std::move(unit);
      }
      return result;
    }
    case amqp::FrameType::header:
    case amqp::FrameType::body:
      return on_content_frame(frame);
  }
  result.error = "unknown frame type";
  return result;
}

InboundAssembler::Result InboundAssembler::on_content_frame(const amqp::Frame& frame) {
  Result result;
  if (!pending_ || frame.channel != pending_->channel) {
    result.error = "a content frame arrived without the method it belongs to";
    return result;
  }
  if (frame.frame_type() == amqp::FrameType::header) {
    if (have_header_) {
      result.error = "a second content header arrived for one message";
      return result;
    }
    amqp::HeaderError error = amqp::decode_content_header(frame.payload, pending_->header);
    if (error != amqp::HeaderError::none) {
      result.error = std::string(amqp::to_string(error));
      return result;
    }
    if (pending_->header.body_size > kMaxBodyBytes) {
      result.error = "a message announces a body of " + std::to_string(pending_->header.body_size) +
                     " bytes, above 512 MiB";
      return result;
    }
    have_header_ = true;
    // Reserved up to a bound only: the rest grows as the body frames actually arrive.
    constexpr std::uint64_t kReserveAtMost = 16u << 20;
    pending_->body.reserve(
        static_cast<std::size_t>(std::min(pending_->header.body_size, kReserveAtMost)));
  } else {
    if (!have_header_) {
      result.error = "a body frame arrived before the content header";
      return result;
    }
    if (frame.payload.size() > pending_->header.body_size - pending_->body.size()) {
      result.error = "the body frames are longer than the content header's body_size";
      return result;
    }
    pending_->body.insert(pending_->body.end(), frame.payload.begin(), frame.payload.end());
  }
  if (have_header_ && pending_->body.size() == pending_->header.body_size) {
    result.unit = std::move(pending_);
    pending_.reset();
    have_header_ = false;
  }
  return result;
}

bool append_publish(amqp::Bytes& out, std::uint16_t channel, const amqp::BasicPublish& method,
                    amqp::ContentHeader header, amqp::ByteView body, std::uint32_t frame_max) {
  header.body_size = body.size();
  const std::size_t start = out.size();
  if (!amqp::append_method_frame(out, channel, method) ||
      !amqp::append_content_header_frame(out, channel, header)) {
    out.resize(start);  // never a method without its content header
    return false;
  }
  const std::size_t chunk = frame_max - amqp::kFrameOverhead;
  for (std::size_t offset = 0; offset < body.size(); offset += chunk) {
    std::size_t size = std::min(chunk, body.size() - offset);
    amqp::append_frame(out, amqp::FrameType::body, channel, body.subspan(offset, size));
  }
  return true;
}

}  // namespace nackguard::replay
