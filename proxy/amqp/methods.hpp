#pragma once
// The methods the proxy inspects or emits. Each struct lists its fields once, in wire order, in
// `fields(self, io)`; the same list drives decoding and encoding (see method_codec.hpp).
// Consecutive bits are passed together to `io.bits(...)`, which packs them into octets.

#include <cstdint>
#include <string>

#include "proxy/amqp/constants.hpp"
#include "proxy/amqp/table.hpp"

namespace nackguard::amqp {

// ---- connection ----
struct ConnectionStart {
  static constexpr std::uint32_t kKey = mid::connection_start;
  std::uint8_t version_major = 0;
  std::uint8_t version_minor = 9;
  FieldTable server_properties;
  std::string mechanisms;  // longstr
  std::string locales;     // longstr
  static void fields(auto& m, auto& io) {
    io.u8(m.version_major), io.u8(m.version_minor), io.table(m.server_properties);
    io.longstr(m.mechanisms), io.longstr(m.locales);
  }
};
struct ConnectionStartOk {
  static constexpr std::uint32_t kKey = mid::connection_start_ok;
  FieldTable client_properties;
  std::string mechanism;
  std::string response;  // longstr; credentials: never logged
  std::string locale;
  static void fields(auto& m, auto& io) {
    io.table(m.client_properties), io.shortstr(m.mechanism), io.longstr(m.response);
    io.shortstr(m.locale);
  }
};
struct ConnectionTune {
  static constexpr std::uint32_t kKey = mid::connection_tune;
  std::uint16_t channel_max = 0;
  std::uint32_t frame_max = 0;
  std::uint16_t heartbeat = 0;
  static void fields(auto& m, auto& io) {
    io.u16(m.channel_max), io.u32(m.frame_max), io.u16(m.heartbeat);
  }
};
struct ConnectionTuneOk : ConnectionTune {
  static constexpr std::uint32_t kKey = mid::connection_tune_ok;
};
struct ConnectionOpen {
  static constexpr std::uint32_t kKey = mid::connection_open;
  std::string virtual_host;
  std::string reserved1;
  bool reserved2 = false;
  static void fields(auto& m, auto& io) {
    io.shortstr(m.virtual_host), io.shortstr(m.reserved1), io.bits(m.reserved2);
  }
};
struct ConnectionOpenOk {
  static constexpr std::uint32_t kKey = mid::connection_open_ok;
  std::string reserved1;
  static void fields(auto& m, auto& io) { io.shortstr(m.reserved1); }
};
struct ConnectionClose {
  static constexpr std::uint32_t kKey = mid::connection_close;
  std::uint16_t reply_code = 0;
  std::string reply_text;
  std::uint16_t class_id = 0;
  std::uint16_t method_id = 0;
  static void fields(auto& m, auto& io) {
    io.u16(m.reply_code), io.shortstr(m.reply_text), io.u16(m.class_id), io.u16(m.method_id);
  }
};
struct ConnectionCloseOk {
  static constexpr std::uint32_t kKey = mid::connection_close_ok;
  static void fields(auto&, auto&) {}
};
struct ConnectionBlocked {
  static constexpr std::uint32_t kKey = mid::connection_blocked;
  std::string reason;
  static void fields(auto& m, auto& io) { io.shortstr(m.reason); }
};
struct ConnectionUnblocked {
  static constexpr std::uint32_t kKey = mid::connection_unblocked;
  static void fields(auto&, auto&) {}
};

// ---- channel ----
struct ChannelOpen {
  static constexpr std::uint32_t kKey = mid::channel_open;
  std::string reserved1;
  static void fields(auto& m, auto& io) { io.shortstr(m.reserved1); }
};
struct ChannelOpenOk {
  static constexpr std::uint32_t kKey = mid::channel_open_ok;
  std::string reserved1;  // longstr
  static void fields(auto& m, auto& io) { io.longstr(m.reserved1); }
};
struct ChannelFlow {
  static constexpr std::uint32_t kKey = mid::channel_flow;
  bool active = true;
  static void fields(auto& m, auto& io) { io.bits(m.active); }
};
struct ChannelFlowOk : ChannelFlow {
  static constexpr std::uint32_t kKey = mid::channel_flow_ok;
};
struct ChannelClose : ConnectionClose {
  static constexpr std::uint32_t kKey = mid::channel_close;
};
struct ChannelCloseOk {
  static constexpr std::uint32_t kKey = mid::channel_close_ok;
  static void fields(auto&, auto&) {}
};

// ---- queue ----
struct QueueDeclare {
  static constexpr std::uint32_t kKey = mid::queue_declare;
  std::uint16_t reserved1 = 0;
  std::string queue;
  bool passive = false, durable = false, exclusive = false, auto_delete = false, no_wait = false;
  FieldTable arguments;
  static void fields(auto& m, auto& io) {
    io.u16(m.reserved1), io.shortstr(m.queue);
    io.bits(m.passive, m.durable, m.exclusive, m.auto_delete, m.no_wait);
    io.table(m.arguments);
  }
};
struct QueueDeclareOk {
  static constexpr std::uint32_t kKey = mid::queue_declare_ok;
  std::string queue;
  std::uint32_t message_count = 0;
  std::uint32_t consumer_count = 0;
  static void fields(auto& m, auto& io) {
    io.shortstr(m.queue), io.u32(m.message_count), io.u32(m.consumer_count);
  }
};

// ---- basic ----
struct BasicQos {
  static constexpr std::uint32_t kKey = mid::basic_qos;
  std::uint32_t prefetch_size = 0;
  std::uint16_t prefetch_count = 0;
  bool global = false;
  static void fields(auto& m, auto& io) {
    io.u32(m.prefetch_size), io.u16(m.prefetch_count), io.bits(m.global);
  }
};
struct BasicQosOk {
  static constexpr std::uint32_t kKey = mid::basic_qos_ok;
  static void fields(auto&, auto&) {}
};
struct BasicConsume {
  static constexpr std::uint32_t kKey = mid::basic_consume;
  std::uint16_t reserved1 = 0;
  std::string queue;
  std::string consumer_tag;
  bool no_local = false, no_ack = false, exclusive = false, no_wait = false;
  FieldTable arguments;
  static void fields(auto& m, auto& io) {
    io.u16(m.reserved1), io.shortstr(m.queue), io.shortstr(m.consumer_tag);
    io.bits(m.no_local, m.no_ack, m.exclusive, m.no_wait);
    io.table(m.arguments);
  }
};
struct BasicConsumeOk {
  static constexpr std::uint32_t kKey = mid::basic_consume_ok;
  std::string consumer_tag;
  static void fields(auto& m, auto& io) { io.shortstr(m.consumer_tag); }
};
struct BasicCancel {
  static constexpr std::uint32_t kKey = mid::basic_cancel;
  std::string consumer_tag;
  bool no_wait = false;
  static void fields(auto& m, auto& io) { io.shortstr(m.consumer_tag), io.bits(m.no_wait); }
};
struct BasicCancelOk : BasicConsumeOk {
  static constexpr std::uint32_t kKey = mid::basic_cancel_ok;
};
struct BasicPublish {
  static constexpr std::uint32_t kKey = mid::basic_publish;
  std::uint16_t reserved1 = 0;
  std::string exchange;
  std::string routing_key;
  bool mandatory = false, immediate = false;
  static void fields(auto& m, auto& io) {
    io.u16(m.reserved1), io.shortstr(m.exchange), io.shortstr(m.routing_key);
    io.bits(m.mandatory, m.immediate);
  }
};
struct BasicReturn {
  static constexpr std::uint32_t kKey = mid::basic_return;
  std::uint16_t reply_code = 0;
  std::string reply_text;
  std::string exchange;
  std::string routing_key;
  static void fields(auto& m, auto& io) {
    io.u16(m.reply_code), io.shortstr(m.reply_text), io.shortstr(m.exchange);
    io.shortstr(m.routing_key);
  }
};
struct BasicDeliver {
  static constexpr std::uint32_t kKey = mid::basic_deliver;
  std::string consumer_tag;
  std::uint64_t delivery_tag = 0;
  bool redelivered = false;
  std::string exchange;
  std::string routing_key;
  static void fields(auto& m, auto& io) {
    io.shortstr(m.consumer_tag), io.u64(m.delivery_tag), io.bits(m.redelivered);
    io.shortstr(m.exchange), io.shortstr(m.routing_key);
  }
};
struct BasicGet {
  static constexpr std::uint32_t kKey = mid::basic_get;
  std::uint16_t reserved1 = 0;
  std::string queue;
  bool no_ack = false;
  static void fields(auto& m, auto& io) {
    io.u16(m.reserved1), io.shortstr(m.queue), io.bits(m.no_ack);
  }
};
struct BasicGetOk {
  static constexpr std::uint32_t kKey = mid::basic_get_ok;
  std::uint64_t delivery_tag = 0;
  bool redelivered = false;
  std::string exchange;
  std::string routing_key;
  std::uint32_t message_count = 0;
  static void fields(auto& m, auto& io) {
    io.u64(m.delivery_tag), io.bits(m.redelivered), io.shortstr(m.exchange);
    io.shortstr(m.routing_key), io.u32(m.message_count);
  }
};
struct BasicGetEmpty {
  static constexpr std::uint32_t kKey = mid::basic_get_empty;
  std::string reserved1;
  static void fields(auto& m, auto& io) { io.shortstr(m.reserved1); }
};
struct BasicAck {
  static constexpr std::uint32_t kKey = mid::basic_ack;
  std::uint64_t delivery_tag = 0;
  bool multiple = false;
  static void fields(auto& m, auto& io) { io.u64(m.delivery_tag), io.bits(m.multiple); }
};
struct BasicNack {
  static constexpr std::uint32_t kKey = mid::basic_nack;
  std::uint64_t delivery_tag = 0;
  bool multiple = false, requeue = true;
  static void fields(auto& m, auto& io) { io.u64(m.delivery_tag), io.bits(m.multiple, m.requeue); }
};
struct BasicReject {
  static constexpr std::uint32_t kKey = mid::basic_reject;
  std::uint64_t delivery_tag = 0;
  bool requeue = true;
  static void fields(auto& m, auto& io) { io.u64(m.delivery_tag), io.bits(m.requeue); }
};
struct BasicRecover {
  static constexpr std::uint32_t kKey = mid::basic_recover;
  bool requeue = false;
  static void fields(auto& m, auto& io) { io.bits(m.requeue); }
};
struct BasicRecoverAsync : BasicRecover {
  static constexpr std::uint32_t kKey = mid::basic_recover_async;
};
struct BasicRecoverOk {
  static constexpr std::uint32_t kKey = mid::basic_recover_ok;
  static void fields(auto&, auto&) {}
};

// ---- confirm ----
struct ConfirmSelect {
  static constexpr std::uint32_t kKey = mid::confirm_select;
  bool no_wait = false;
  static void fields(auto& m, auto& io) { io.bits(m.no_wait); }
};
struct ConfirmSelectOk {
  static constexpr std::uint32_t kKey = mid::confirm_select_ok;
  static void fields(auto&, auto&) {}
};

}  // namespace nackguard::amqp
