#include "proxy/replay/rabbitmq_properties.hpp"

#include <cstring>
#include <type_traits>
#include <variant>

#include "proxy/replay/client_internal.hpp"

namespace nackguard::replay {

namespace {

using detail::bytes_of;

// Sets an optional short-string property and its flag.
void set_string(amqp_basic_properties_t& out, amqp_flags_t flag, amqp_bytes_t& field,
                const std::optional<std::string>& value) {
  if (!value) return;
  field = bytes_of(*value);
  out._flags |= flag;
}

}  // namespace

RabbitProperties::RabbitProperties(const amqp::BasicProperties& p) {
  amqp_basic_properties_t& d = decoded_;
  set_string(d, AMQP_BASIC_CONTENT_TYPE_FLAG, d.content_type, p.content_type);
  set_string(d, AMQP_BASIC_CONTENT_ENCODING_FLAG, d.content_encoding, p.content_encoding);
  if (p.headers) {
    d.headers = table(*p.headers);
    d._flags |= AMQP_BASIC_HEADERS_FLAG;
  }
  if (p.delivery_mode) {
    d.delivery_mode = *p.delivery_mode;
    d._flags |= AMQP_BASIC_DELIVERY_MODE_FLAG;
  }
  if (p.priority) {
    d.priority = *p.priority;
    d._flags |= AMQP_BASIC_PRIORITY_FLAG;
  }
  set_string(d, AMQP_BASIC_CORRELATION_ID_FLAG, d.correlation_id, p.correlation_id);
  set_string(d, AMQP_BASIC_REPLY_TO_FLAG, d.reply_to, p.reply_to);
  set_string(d, AMQP_BASIC_EXPIRATION_FLAG, d.expiration, p.expiration);
  set_string(d, AMQP_BASIC_MESSAGE_ID_FLAG, d.message_id, p.message_id);
  if (p.timestamp) {
    d.timestamp = *p.timestamp;
    d._flags |= AMQP_BASIC_TIMESTAMP_FLAG;
  }
  set_string(d, AMQP_BASIC_TYPE_FLAG, d.type, p.type);
  set_string(d, AMQP_BASIC_USER_ID_FLAG, d.user_id, p.user_id);
  set_string(d, AMQP_BASIC_APP_ID_FLAG, d.app_id, p.app_id);
  set_string(d, AMQP_BASIC_CLUSTER_ID_FLAG, d.cluster_id, p.cluster_id);
}

amqp_table_t RabbitProperties::table(const amqp::FieldTable& table) {
  std::vector<amqp_table_entry_t>& entries = entries_.emplace_back(table.entries.size());
  for (std::size_t i = 0; i < table.entries.size(); ++i) {
    entries[i].key = bytes_of(table.entries[i].first);
    entries[i].value = value(table.entries[i].second);
  }
  return {static_cast<int>(entries.size()), entries.data()};
}

amqp_array_t RabbitProperties::array(const amqp::FieldArray& array) {
  std::vector<amqp_field_value_t>& items = values_.emplace_back(array.items.size());
  for (std::size_t i = 0; i < array.items.size(); ++i) items[i] = value(array.items[i]);
  return {static_cast<int>(items.size()), items.data()};
}

// The same letter, and the value in the member rabbitmq-c reads for that letter.
amqp_field_value_t RabbitProperties::value(const amqp::FieldValue& in) {
  amqp_field_value_t out{};
  out.kind = static_cast<std::uint8_t>(in.type);
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool>)
          out.value.boolean = v ? 1 : 0;
        else if constexpr (std::is_same_v<T, std::int8_t>)
          out.value.i8 = v;
        else if constexpr (std::is_same_v<T, std::uint8_t>)
          out.value.u8 = v;
        else if constexpr (std::is_same_v<T, std::int16_t>)
          out.value.i16 = v;
        else if constexpr (std::is_same_v<T, std::uint16_t>)
          out.value.u16 = v;
        else if constexpr (std::is_same_v<T, std::int32_t>)
          out.value.i32 = v;
        else if constexpr (std::is_same_v<T, std::uint32_t>)
          out.value.u32 = v;
        else if constexpr (std::is_same_v<T, std::int64_t>)
          out.value.i64 = v;
        else if constexpr (std::is_same_v<T, std::uint64_t>)
          out.value.u64 = v;
        else if constexpr (std::is_same_v<T, float>)
          out.value.f32 = v;
        else if constexpr (std::is_same_v<T, double>)
          out.value.f64 = v;
        else if constexpr (std::is_same_v<T, amqp::Decimal>)
          out.value.decimal = {v.scale, v.value};
        else if constexpr (std::is_same_v<T, std::string>)
          out.value.bytes = bytes_of(v);
        else if constexpr (std::is_same_v<T, amqp::FieldArray>)
          out.value.array = array(v);
        else if constexpr (std::is_same_v<T, amqp::FieldTable>)
          out.value.table = table(v);
      },
      in.value);
  return out;
}

amqp::HeaderError decode_raw_header(std::uint16_t class_id, std::uint64_t body_size,
                                    amqp_bytes_t raw, amqp::ContentHeader& out) {
  amqp::Bytes payload;
  payload.reserve(12 + raw.len);
  amqp::ByteWriter writer(payload);
  writer.u16(class_id);
  writer.u16(0);  // weight
  writer.u64(body_size);
  writer.bytes({static_cast<const std::uint8_t*>(raw.bytes), raw.len});
  return amqp::decode_content_header(payload, out);
}

}  // namespace nackguard::replay
