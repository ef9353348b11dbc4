#pragma once
// Protocol constants of AMQP 0-9-1 with RabbitMQ's errata.

#include <cstddef>
#include <cstdint>
#include <initializer_list>

namespace nackguard::amqp {

enum class FrameType : std::uint8_t { method = 1, header = 2, body = 3, heartbeat = 8 };

inline constexpr std::uint8_t kFrameEnd = 0xCE;
inline constexpr std::size_t kFrameHeaderSize = 7;  // type, channel, payload size
inline constexpr std::size_t kFrameOverhead = kFrameHeaderSize + 1;
inline constexpr std::uint32_t kFrameMinSize = 4096;
inline constexpr std::size_t kProtocolHeaderSize = 8;
inline constexpr std::uint8_t kProtocolHeader[kProtocolHeaderSize] = {'A', 'M', 'Q', 'P',
                                                                      0,   0,   9,   1};

// Reply codes used by the proxy.
namespace reply {
inline constexpr std::uint16_t success = 200;
inline constexpr std::uint16_t connection_forced = 320;
inline constexpr std::uint16_t precondition_failed = 406;
inline constexpr std::uint16_t frame_error = 501;
inline constexpr std::uint16_t syntax_error = 502;
inline constexpr std::uint16_t command_invalid = 503;
inline constexpr std::uint16_t channel_error = 504;
inline constexpr std::uint16_t unexpected_frame = 505;
inline constexpr std::uint16_t resource_error = 506;
inline constexpr std::uint16_t not_allowed = 530;
inline constexpr std::uint16_t not_implemented = 540;
inline constexpr std::uint16_t internal_error = 541;
}  // namespace reply

inline constexpr std::uint16_t kClassConnection = 10;
inline constexpr std::uint16_t kClassChannel = 20;
inline constexpr std::uint16_t kClassQueue = 50;
inline constexpr std::uint16_t kClassBasic = 60;
inline constexpr std::uint16_t kClassConfirm = 85;
inline constexpr std::uint16_t kClassTx = 90;

// A method is named by (class id, method id); packed into one integer for switches.
constexpr std::uint32_t method_key(std::uint16_t class_id, std::uint16_t method_id) {
  return (static_cast<std::uint32_t>(class_id) << 16) | method_id;
}

namespace mid {
inline constexpr std::uint32_t connection_start = method_key(10, 10);
inline constexpr std::uint32_t connection_start_ok = method_key(10, 11);
inline constexpr std::uint32_t connection_secure = method_key(10, 20);
inline constexpr std::uint32_t connection_secure_ok = method_key(10, 21);
inline constexpr std::uint32_t connection_tune = method_key(10, 30);
inline constexpr std::uint32_t connection_tune_ok = method_key(10, 31);
inline constexpr std::uint32_t connection_open = method_key(10, 40);
inline constexpr std::uint32_t connection_open_ok = method_key(10, 41);
inline constexpr std::uint32_t connection_close = method_key(10, 50);
inline constexpr std::uint32_t connection_close_ok = method_key(10, 51);
inline constexpr std::uint32_t connection_blocked = method_key(10, 60);
inline constexpr std::uint32_t connection_unblocked = method_key(10, 61);
inline constexpr std::uint32_t channel_open = method_key(20, 10);
inline constexpr std::uint32_t channel_open_ok = method_key(20, 11);
inline constexpr std::uint32_t channel_flow = method_key(20, 20);
inline constexpr std::uint32_t channel_flow_ok = method_key(20, 21);
inline constexpr std::uint32_t channel_close = method_key(20, 40);
inline constexpr std::uint32_t channel_close_ok = method_key(20, 41);
inline constexpr std::uint32_t queue_declare = method_key(50, 10);
inline constexpr std::uint32_t queue_declare_ok = method_key(50, 11);
inline constexpr std::uint32_t basic_qos = method_key(60, 10);
inline constexpr std::uint32_t basic_qos_ok = method_key(60, 11);
inline constexpr std::uint32_t basic_consume = method_key(60, 20);
inline constexpr std::uint32_t basic_consume_ok = method_key(60, 21);
inline constexpr std::uint32_t basic_cancel = method_key(60, 30);
inline constexpr std::uint32_t basic_cancel_ok = method_key(60, 31);
inline constexpr std::uint32_t basic_publish = method_key(60, 40);
inline constexpr std::uint32_t basic_return = method_key(60, 50);
inline constexpr std::uint32_t basic_deliver = method_key(60, 60);
inline constexpr std::uint32_t basic_get = method_key(60, 70);
inline constexpr std::uint32_t basic_get_ok = method_key(60, 71);
inline constexpr std::uint32_t basic_get_empty = method_key(60, 72);
inline constexpr std::uint32_t basic_ack = method_key(60, 80);
inline constexpr std::uint32_t basic_reject = method_key(60, 90);
inline constexpr std::uint32_t basic_recover_async = method_key(60, 100);
inline constexpr std::uint32_t basic_recover = method_key(60, 110);
inline constexpr std::uint32_t basic_recover_ok = method_key(60, 111);
inline constexpr std::uint32_t basic_nack = method_key(60, 120);
inline constexpr std::uint32_t confirm_select = method_key(85, 10);
inline constexpr std::uint32_t confirm_select_ok = method_key(85, 11);
}  // namespace mid

// Whether (class, method) is a method of AMQP 0-9-1 as RabbitMQ speaks it: the spec's classes
// connection, channel, access, exchange, queue, basic and tx, with RabbitMQ's extensions
// (connection.blocked/unblocked/update-secret, exchange.bind/unbind, basic.nack, confirm).
// Any other id is unknown: no peer may send it, and a broker given one may crash the
// connection (RabbitMQ 3.10 answers 320 with no cause).
constexpr bool is_spec_method(std::uint32_t key) {
  auto in = [](std::uint16_t method, std::initializer_list<std::uint16_t> ids) {
    for (std::uint16_t id : ids) {
      if (id == method) return true;
    }
    return false;
  };
  std::uint16_t method = static_cast<std::uint16_t>(key & 0xFFFF);
  switch (key >> 16) {
    case kClassConnection:
      return in(method, {10, 11, 20, 21, 30, 31, 40, 41, 50, 51, 60, 61, 70, 71});
    case kClassChannel:
      return in(method, {10, 11, 20, 21, 40, 41});
    case 30:  // access (deprecated; RabbitMQ still answers access.request)
      return in(method, {10, 11});
    case 40:  // exchange
      return in(method, {10, 11, 20, 21, 30, 31, 40, 51});
    case kClassQueue:
      return in(method, {10, 11, 20, 21, 30, 31, 40, 41, 50, 51});
    case kClassBasic:
      return in(method,
                {10, 11, 20, 21, 30, 31, 40, 50, 60, 70, 71, 72, 80, 90, 100, 110, 111, 120});
    case kClassConfirm:
      return in(method, {10, 11});
    case kClassTx:
      return in(method, {10, 11, 20, 21, 30, 31});
    default:
      return false;
  }
}

// Methods followed by a content header and body frames.
constexpr bool carries_content(std::uint32_t key) {
  return key == mid::basic_publish || key == mid::basic_return || key == mid::basic_deliver ||
         key == mid::basic_get_ok;
}

}  // namespace nackguard::amqp
