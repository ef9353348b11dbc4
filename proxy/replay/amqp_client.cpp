#include "proxy/replay/amqp_client.hpp"

#include <algorithm>
#include <utility>

#include "proxy/amqp/method_codec.hpp"
#include "proxy/replay/errors.hpp"

namespace nackguard::replay {

namespace {

constexpr auto kCloseWait = std::chrono::seconds(2);
constexpr auto kIdleSlice = std::chrono::milliseconds(200);

}  // namespace

Client::Client(ClientSettings settings) : settings_(std::move(settings)) {}

Client::~Client() {
  close();
}

void Client::send(const amqp::Bytes& bytes) {
  queued_.insert(queued_.end(), bytes.begin(), bytes.end());
  flush();
}

void Client::flush() {
  if (queued_.empty()) return;
  amqp::Bytes out = std::exchange(queued_, {});
  transport_.write(out, reply_deadline());
  last_sent_ = Clock::now();
}

void Client::open() {
  const Upstream& upstream = settings_.upstream;
  transport_.connect(upstream.host, upstream.port, settings_.connect_timeout);
  last_sent_ = last_received_ = Clock::now();

  HandshakeParams params;
  params.user = upstream.user;
  params.password = upstream.password;
  params.vhost = upstream.vhost;
  params.endpoint = endpoint();
  params.max_heartbeat = settings_.max_heartbeat;
  params.version = settings_.version;
  Handshake handshake(std::move(params));
  amqp::Bytes out;
  handshake.begin(out);
  send(out);

  const auto deadline = reply_deadline();
  while (handshake.state() != Handshake::State::done &&
         handshake.state() != Handshake::State::failed) {
    amqp::FrameResult decoded = decoder_.decode(input_);
    if (decoded.status == amqp::FrameResult::Status::need_more) {
      bool got = false;
      try {
        got = transport_.read_some(input_, deadline);
      } catch (const Failure& e) {
        throw Failure(std::string(e.what()) +
                      " during the AMQP handshake; is it a RabbitMQ AMQP 0-9-1 port?");
      }
      if (!got) throw Failure(endpoint() + " did not complete the AMQP handshake in time");
      continue;
    }
    if (decoded.status == amqp::FrameResult::Status::error) {
      bool protocol_header = input_.size() >= 4 && amqp::as_chars(input_).starts_with("AMQP");
      throw Failure(endpoint() + (protocol_header
                                      ? " refused AMQP 0-9-1 (it answered with another version)"
                                      : " is not an AMQP 0-9-1 broker (" +
                                            std::string(amqp::to_string(decoded.error)) + ")"));
    }
    out.clear();
    handshake.on_frame(decoded.frame, out);
    input_.erase(input_.begin(),
                 input_.begin() + static_cast<std::ptrdiff_t>(decoded.frame.raw.size()));
    if (!out.empty()) send(out);
  }
  if (handshake.state() == Handshake::State::failed) {
    transport_.close();
    throw Failure(handshake.error());
  }
  tuning_ = handshake.tuning();
  decoder_.set_frame_max(tuning_.frame_max);
  last_received_ = Clock::now();
  open_ = true;

  out.clear();
  if (!amqp::append_method_frame(out, kChannel, amqp::ChannelOpen{})) {
    throw Failure("channel.open could not be encoded");
  }
  send(out);
  amqp::ChannelOpenOk open_ok;
  expect(open_ok, "channel.open-ok");
}

std::uint32_t Client::declare_passive(const std::string& queue) {
  amqp::QueueDeclare declare;
  declare.queue = queue;
  declare.passive = true;
  amqp::Bytes out;
  if (!amqp::append_method_frame(out, kChannel, declare)) {
    throw Failure("queue name \"" + queue + "\" is over 255 bytes; AMQP allows at most 255");
  }
  send(out);
  amqp::QueueDeclareOk ok;
  expect(ok, "queue.declare-ok");
  return ok.message_count;
}

void Client::confirm_select() {
  amqp::Bytes out;
  amqp::append_fixed_method_frame(out, kChannel, amqp::ConfirmSelect{});
  send(out);
  amqp::ConfirmSelectOk ok;
  expect(ok, "confirm.select-ok");
  publish_seq_ = 0;
}

std::optional<Delivery> Client::get(const std::string& queue) {
  amqp::BasicGet request;
  request.queue = queue;
  request.no_ack = false;
  amqp::Bytes out;
  if (!amqp::append_method_frame(out, kChannel, request)) {
    throw Failure("queue name \"" + queue + "\" is over 255 bytes; AMQP allows at most 255");
  }
  send(out);

  const auto deadline = reply_deadline();
  Inbound unit = next_or_throw(deadline, "basic.get-ok");
  while (on_publisher_event(unit)) unit = next_or_throw(deadline, "basic.get-ok");
  if (unit.kind == Inbound::Kind::method && unit.method_key == amqp::mid::basic_get_empty) {
    return std::nullopt;
  }
  amqp::BasicGetOk ok;
  if (unit.kind != Inbound::Kind::content || unit.method_key != amqp::mid::basic_get_ok ||
      amqp::decode_method(unit.method, ok) != amqp::MethodError::none) {
    throw Failure(endpoint() + " answered basic.get with method " +
                  describe_method(unit.method_key));
  }
  Delivery delivery;
  delivery.delivery_tag = ok.delivery_tag;
  delivery.redelivered = ok.redelivered;
  delivery.message_count = ok.message_count;
  delivery.header = std::move(unit.header);
  delivery.body = std::move(unit.body);
  return delivery;
}

void Client::idle_until(Clock::time_point until, const std::function<bool()>& stop) {
  for (auto now = Clock::now(); now < until && !(stop && stop()); now = Clock::now()) {
    std::optional<Inbound> unit = next(std::min(until, now + kIdleSlice));
    if (unit && !on_publisher_event(*unit)) {
      throw Failure(endpoint() + " sent method " + describe_method(unit->method_key) +
                    " while nothing was awaited");
    }
  }
}

void Client::close() noexcept {
  if (!open_) {
    transport_.close();
    return;
  }
  open_ = false;
  try {
    amqp::ConnectionClose close;
    close.reply_code = amqp::reply::success;
    close.reply_text = "replay done";
    amqp::Bytes out;
    amqp::append_close_frame(out, 0, close);
    send(out);
    // Whatever else is in flight is dropped; only close-ok (or the socket closing) ends this.
    const auto deadline = Clock::now() + kCloseWait;
    for (;;) {
      amqp::FrameResult decoded = decoder_.decode(input_);
      if (decoded.status == amqp::FrameResult::Status::error) break;
      if (decoded.status == amqp::FrameResult::Status::need_more) {
        if (!transport_.read_some(input_, deadline)) break;
        continue;
      }
      bool close_ok =
          decoded.frame.frame_type() == amqp::FrameType::method && decoded.frame.channel == 0 &&
          amqp::peek_method_key(decoded.frame.payload) == amqp::mid::connection_close_ok;
      input_.erase(input_.begin(),
                   input_.begin() + static_cast<std::ptrdiff_t>(decoded.frame.raw.size()));
      if (close_ok) break;
    }
  } catch (...) {
    // The connection is going away either way.
  }
  transport_.close();
}

void Client::keep_alive(Clock::time_point now) {
  if (tuning_.heartbeat == 0) return;
  const auto interval = heartbeat_interval();
  if (now - last_received_ > 2 * interval) {
    throw Failure(endpoint() + " sent nothing for " + std::to_string(2 * tuning_.heartbeat) +
                  " s (two heartbeat intervals); the connection is dead");
  }
  if (now - last_sent_ >= interval / 2) {
    amqp::Bytes out;
    amqp::append_heartbeat(out);
    send(out);
  }
}

std::optional<Inbound> Client::next(Clock::time_point deadline) {
  for (;;) {
    amqp::FrameResult decoded = decoder_.decode(input_);
    if (decoded.status == amqp::FrameResult::Status::error) {
      throw Failure(endpoint() + " sent a malformed frame (" +
                    std::string(amqp::to_string(decoded.error)) + ")");
    }
    if (decoded.status == amqp::FrameResult::Status::frame) {
      InboundAssembler::Result result = assembler_.on_frame(decoded.frame);
      input_.erase(input_.begin(),
                   input_.begin() + static_cast<std::ptrdiff_t>(decoded.frame.raw.size()));
      if (!result.error.empty()) throw Failure(endpoint() + " sent " + result.error);
      if (!result.unit || result.unit->kind == Inbound::Kind::heartbeat) continue;
      Inbound& unit = *result.unit;
      if (unit.method_key == amqp::mid::connection_close ||
          unit.method_key == amqp::mid::channel_close) {
        on_close(unit);
      }
      if (unit.method_key == amqp::mid::connection_blocked) {
        blocked_ = true;
        continue;
      }
      if (unit.method_key == amqp::mid::connection_unblocked) {
        blocked_ = false;
        continue;
      }
      if (unit.channel != kChannel) {
        throw Failure(endpoint() + " sent method " + describe_method(unit.method_key) +
                      " on channel " + std::to_string(unit.channel));
      }
      return std::move(unit);
    }

    flush();
    auto now = Clock::now();
    keep_alive(now);
    if (now >= deadline) return std::nullopt;
    auto wake = deadline;
    if (tuning_.heartbeat != 0) {
      const auto interval = heartbeat_interval();
      wake = std::min({wake, last_sent_ + interval / 2, last_received_ + 2 * interval});
    }
    if (transport_.read_some(input_, std::max(wake, now))) last_received_ = Clock::now();
  }
}

Inbound Client::next_or_throw(Clock::time_point deadline, const char* waiting_for) {
  std::optional<Inbound> unit = next(deadline);
  if (!unit) {
    throw Failure(endpoint() + " did not send " + waiting_for + " within " +
                  std::to_string(settings_.reply_timeout.count() / 1000) + " s" +
                  (blocked_ ? " (it has blocked the connection: a memory or disk alarm)" : ""));
  }
  return std::move(*unit);
}

template <typename M>
void Client::expect(M& out, const char* waiting_for) {
  Inbound unit = next_or_throw(reply_deadline(), waiting_for);
  if (unit.kind != Inbound::Kind::method || unit.method_key != M::kKey) {
    throw Failure(endpoint() + " sent method " + describe_method(unit.method_key) + " instead of " +
                  waiting_for);
  }
  if (amqp::decode_method(unit.method, out) != amqp::MethodError::none) {
    throw Failure(endpoint() + " sent a malformed " + waiting_for);
  }
}

void Client::on_close(const Inbound& unit) {
  const bool connection = unit.method_key == amqp::mid::connection_close;
  amqp::ConnectionClose close;
  if (connection) {
    amqp::decode_method(unit.method, close);
  } else {
    amqp::ChannelClose channel_close;  // the same fields as connection.close
    amqp::decode_method(unit.method, channel_close);
    close = channel_close;
  }
  amqp::Bytes out;
  if (connection) {
    amqp::append_fixed_method_frame(out, 0, amqp::ConnectionCloseOk{});
  } else {
    amqp::append_fixed_method_frame(out, kChannel, amqp::ChannelCloseOk{});
  }
  try {
    send(out);
  } catch (const Failure&) {
    // The close is what matters; a lost close-ok changes nothing for us.
  }
  if (connection) {
    open_ = false;
    transport_.close();
  }
  std::string reply = describe_reply(close.reply_code, close.reply_text);
  throw BrokerClosed(
      endpoint() + " closed the " + (connection ? "connection" : "channel") + ": " + reply,
      close.reply_code, close.reply_text, connection);
}

}  // namespace nackguard::replay
