#include "proxy/replay/amqp_client.hpp"

#include <amqp.h>

#include <algorithm>
#include <utility>

#include "proxy/amqp/method_name.hpp"
#include "proxy/replay/client_internal.hpp"
#include "proxy/replay/errors.hpp"
#include "proxy/replay/rabbitmq_properties.hpp"

namespace nackguard::replay {

namespace {

using namespace detail;  // client_internal.hpp

constexpr auto kCloseWait = std::chrono::seconds(2);
constexpr auto kIdleSlice = std::chrono::milliseconds(200);

}  // namespace

std::string describe_reply(std::uint16_t code, const std::string& text) {
  return std::to_string(code) + " " + text;
}

Client::Client(ClientSettings settings)
    : settings_(std::move(settings)), watchdog_(settings_.reply_timeout) {}

Client::~Client() {
  close();
}

void Client::open() {
  connection_ = amqp_new_connection();
  if (connection_ == nullptr) throw Failure("out of memory for the AMQP connection");
  open_connection(connection_, settings_);  // amqp_client_open.cpp
  open_ = true;
  amqp_channel_open_t channel_open{};
  send_method(kChannel, AMQP_CHANNEL_OPEN_METHOD, &channel_open);
  expect(AMQP_CHANNEL_OPEN_OK_METHOD, "channel.open-ok");
}

[[noreturn]] void Client::fail(int status, const std::string& doing) {
  if (status == AMQP_STATUS_HEARTBEAT_TIMEOUT) {
    throw Failure(endpoint() + " sent nothing for two heartbeat intervals while " + doing +
                  "; the connection is dead");
  }
  if (status == AMQP_STATUS_CONNECTION_CLOSED || status == AMQP_STATUS_SOCKET_CLOSED) {
    throw Failure(endpoint() + " closed the connection while " + doing);
  }
  throw Failure(endpoint() + ": " + amqp_error_string2(status) + " while " + doing);
}

std::uint32_t Client::declare_passive(const std::string& queue) {
  if (queue.size() > 255) {
    throw Failure("queue name \"" + queue + "\" is over 255 bytes; AMQP allows at most 255");
  }
  amqp_queue_declare_t declare{};
  declare.queue = amqp_cstring_bytes(queue.c_str());
  declare.passive = 1;
  declare.arguments = amqp_empty_table;
  send_method(kChannel, AMQP_QUEUE_DECLARE_METHOD, &declare);
  return expect(AMQP_QUEUE_DECLARE_OK_METHOD, "queue.declare-ok").count;
}

void Client::confirm_select() {
  amqp_confirm_select_t select{};
  send_method(kChannel, AMQP_CONFIRM_SELECT_METHOD, &select);
  expect(AMQP_CONFIRM_SELECT_OK_METHOD, "confirm.select-ok");
  publish_seq_ = 0;
}

std::optional<Delivery> Client::get(const std::string& queue) {
  if (queue.size() > 255) {
    throw Failure("queue name \"" + queue + "\" is over 255 bytes; AMQP allows at most 255");
  }
  amqp_basic_get_t request{};
  request.queue = amqp_cstring_bytes(queue.c_str());
  request.no_ack = 0;
  send_method(kChannel, AMQP_BASIC_GET_METHOD, &request);

  const auto deadline = reply_deadline();
  Inbound unit = next_or_throw(deadline, "basic.get-ok");
  while (on_publisher_event(unit)) unit = next_or_throw(deadline, "basic.get-ok");
  if (unit.method == AMQP_BASIC_GET_EMPTY_METHOD) return std::nullopt;
  if (unit.method != AMQP_BASIC_GET_OK_METHOD) {
    throw Failure(endpoint() + " answered basic.get with " + amqp::describe_method(unit.method));
  }
  Delivery delivery;
  delivery.delivery_tag = unit.tag;
  delivery.redelivered = unit.flag;
  delivery.message_count = unit.count;
  delivery.header = std::move(*unit.header);
  delivery.body = std::move(unit.body);
  return delivery;
}

void Client::idle_until(Clock::time_point until, const std::function<bool()>& stop) {
  for (auto now = Clock::now(); now < until && !(stop && stop()); now = Clock::now()) {
    std::optional<Inbound> unit = next(std::min(until, now + kIdleSlice));
    if (unit && !on_publisher_event(*unit)) {
      throw Failure(endpoint() + " sent " + amqp::describe_method(unit->method) +
                    " while nothing was awaited");
    }
  }
}

void Client::close() noexcept {
  if (connection_ == nullptr) return;
  if (open_) {
    open_ = false;
    // Bounded: a broker that does not answer close-ok leaves within kCloseWait.
    timeval wait = to_timeval(kCloseWait);
    amqp_set_rpc_timeout(connection_, &wait);
    auto armed = arm_write();
    amqp_connection_close(connection_, AMQP_REPLY_SUCCESS);
  }
  amqp_destroy_connection(connection_);
  connection_ = nullptr;
}

WriteWatchdog::Armed Client::arm_write() {
  return watchdog_.arm(amqp_get_sockfd(connection_));
}

void Client::check_write(int status, const std::string& doing) {
  if (status == AMQP_STATUS_OK) return;
  if (watchdog_.fired()) {
    throw Failure(endpoint() + " read nothing of what was written to it for " +
                  seconds(settings_.reply_timeout) + " while " + doing +
                  " (a memory or disk alarm blocks publishers); the connection is closed");
  }
  fail(status, doing);
}

void Client::send_method(std::uint16_t channel, std::uint32_t method, void* decoded) {
  auto armed = arm_write();
  check_write(amqp_send_method(connection_, channel, method, decoded),
              std::string("sending ") + amqp::describe_method(method));
}

bool Client::wait_frame(void* frame, Clock::time_point deadline) {
  timeval timeout = to_timeval(deadline - Clock::now());
  const int status =
      amqp_simple_wait_frame_noblock(connection_, static_cast<amqp_frame_t*>(frame), &timeout);
  if (status == AMQP_STATUS_TIMEOUT) return false;
  if (status != AMQP_STATUS_OK) fail(status, "waiting for the broker");
  return true;
}

std::optional<Client::Inbound> Client::next(Clock::time_point deadline) {
  for (;;) {
    amqp_maybe_release_buffers(connection_);
    amqp_frame_t frame;
    if (!wait_frame(&frame, deadline)) return std::nullopt;
    if (frame.frame_type != AMQP_FRAME_METHOD) {
      throw Failure(endpoint() + " sent a content frame without its method");
    }
    Inbound unit;
    unit.method = frame.payload.method.id;
    const void* decoded = frame.payload.method.decoded;
    if (take_connection_method(unit, decoded)) continue;
    if (frame.channel != kChannel) {
      throw Failure(endpoint() + " sent " + amqp::describe_method(unit.method) + " on channel " +
                    std::to_string(frame.channel));
    }
    take_fields(unit, decoded, deadline);
    return unit;
  }
}

bool Client::take_connection_method(Inbound& unit, const void* decoded) {
  switch (unit.method) {
    case AMQP_CONNECTION_BLOCKED_METHOD:
      blocked_ = true;
      return true;
    case AMQP_CONNECTION_UNBLOCKED_METHOD:
      blocked_ = false;
      return true;
    case AMQP_CONNECTION_CLOSE_METHOD: {
      const auto* m = static_cast<const amqp_connection_close_t*>(decoded);
      unit.code = m->reply_code;
      unit.text = text_of(m->reply_text);
      on_close(unit);
    }
    case AMQP_CHANNEL_CLOSE_METHOD: {
      const auto* m = static_cast<const amqp_channel_close_t*>(decoded);
      unit.code = m->reply_code;
      unit.text = text_of(m->reply_text);
      on_close(unit);
    }
    default:
      return false;
  }
}

void Client::take_fields(Inbound& unit, const void* decoded, Clock::time_point deadline) {
  switch (unit.method) {
    case AMQP_QUEUE_DECLARE_OK_METHOD:
      unit.count = static_cast<const amqp_queue_declare_ok_t*>(decoded)->message_count;
      break;
    case AMQP_BASIC_ACK_METHOD: {
      const auto* m = static_cast<const amqp_basic_ack_t*>(decoded);
      unit.tag = m->delivery_tag;
      unit.flag = m->multiple != 0;
      break;
    }
    case AMQP_BASIC_NACK_METHOD: {
      const auto* m = static_cast<const amqp_basic_nack_t*>(decoded);
      unit.tag = m->delivery_tag;
      unit.flag = m->multiple != 0;
      break;
    }
    case AMQP_BASIC_GET_OK_METHOD: {
      const auto* m = static_cast<const amqp_basic_get_ok_t*>(decoded);
      unit.tag = m->delivery_tag;
      unit.flag = m->redelivered != 0;
      unit.count = m->message_count;
      read_content(unit, deadline);
      break;
    }
    case AMQP_BASIC_RETURN_METHOD: {
      const auto* m = static_cast<const amqp_basic_return_t*>(decoded);
      unit.code = m->reply_code;
      unit.text = text_of(m->reply_text);
      read_content(unit, deadline);
      break;
    }
    default:
      break;
  }
}

// The header and body frames that follow basic.get-ok or basic.return. The raw property
// bytes go to the codec, so that the rewrite sees every header with its type letter.
void Client::read_content(Inbound& unit, Clock::time_point deadline) {
  amqp_frame_t frame;
  const char* waiting = "a message's content";
  // A message in transit is waited for a whole reply timeout, even past `deadline`.
  const auto content_deadline = std::max(deadline, reply_deadline());
  if (!wait_frame(&frame, content_deadline)) fail(AMQP_STATUS_TIMEOUT, waiting);
  if (frame.frame_type != AMQP_FRAME_HEADER || frame.channel != kChannel) {
    throw Failure(endpoint() + " sent a method where a content header was due");
  }
  const std::uint64_t size = frame.payload.properties.body_size;
  if (size > kMaxBodyBytes) {
    throw Failure(endpoint() + " announced a " + std::to_string(size) +
                  "-byte message, over RabbitMQ's 512 MiB limit");
  }
  amqp::ContentHeader header;
  const amqp::HeaderError error = decode_raw_header(frame.payload.properties.class_id, size,
                                                    frame.payload.properties.raw, header);
  if (error != amqp::HeaderError::none) {
    throw Failure(endpoint() + " sent a content header the codec refuses (" +
                  std::string(amqp::to_string(error)) + ")");
  }
  unit.header = std::move(header);
  unit.body.reserve(size);
  while (unit.body.size() < size) {
    if (!wait_frame(&frame, content_deadline)) fail(AMQP_STATUS_TIMEOUT, waiting);
    if (frame.frame_type != AMQP_FRAME_BODY || frame.channel != kChannel ||
        frame.payload.body_fragment.len > size - unit.body.size()) {
      throw Failure(endpoint() + " sent a message whose body frames do not add up");
    }
    const auto* bytes = static_cast<const std::uint8_t*>(frame.payload.body_fragment.bytes);
    unit.body.insert(unit.body.end(), bytes, bytes + frame.payload.body_fragment.len);
  }
}

Client::Inbound Client::next_or_throw(Clock::time_point deadline, const char* waiting_for) {
  std::optional<Inbound> unit = next(deadline);
  if (!unit) {
    throw Failure(endpoint() + " did not send " + waiting_for + " within " +
                  seconds(settings_.reply_timeout) +
                  (blocked_ ? " (it has blocked the connection: a memory or disk alarm)" : ""));
  }
  return std::move(*unit);
}

Client::Inbound Client::expect(std::uint32_t method, const char* waiting_for) {
  Inbound unit = next_or_throw(reply_deadline(), waiting_for);
  if (unit.method != method) {
    throw Failure(endpoint() + " sent " + amqp::describe_method(unit.method) + " instead of " +
                  waiting_for);
  }
  return unit;
}

void Client::on_close(const Inbound& unit) {
  const bool connection = unit.method == AMQP_CONNECTION_CLOSE_METHOD;
  if (connection) {
    amqp_connection_close_ok_t ok{};
    amqp_send_method(connection_, 0, AMQP_CONNECTION_CLOSE_OK_METHOD, &ok);
    open_ = false;
  } else {
    amqp_channel_close_ok_t ok{};
    amqp_send_method(connection_, kChannel, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok);
  }
  throw BrokerClosed(endpoint() + " closed the " + (connection ? "connection" : "channel") + ": " +
                         describe_reply(unit.code, unit.text),
                     unit.code, unit.text, connection);
}

}  // namespace nackguard::replay
