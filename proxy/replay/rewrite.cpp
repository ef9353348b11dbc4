#include "proxy/replay/rewrite.hpp"

#include <algorithm>
#include <limits>

#include "proxy/guard/header_names.hpp"

namespace nackguard::replay {

const amqp::FieldValue* header_of(const amqp::BasicProperties& properties, std::string_view name) {
  return properties.headers ? properties.headers->find(name) : nullptr;
}

std::int64_t replays_of(const amqp::BasicProperties& properties) {
  const amqp::FieldValue* value = header_of(properties, kReplaysHeader);
  if (value == nullptr) return 0;
  std::optional<std::int64_t> count = value->as_int();
  return count && *count > 0 ? *count : 0;
}

std::string reason_of(const amqp::BasicProperties& properties) {
  const amqp::FieldValue* value = header_of(properties, guard::kReasonHeader);
  const std::string* text = value ? value->as_string() : nullptr;
  if (text == nullptr || text->empty()) return std::string(kNoReason);
  return printable(*text, 80);
}

std::string label_of(const amqp::BasicProperties& properties) {
  if (!properties.message_id || properties.message_id->empty()) return "(no message_id)";
  return printable(*properties.message_id);
}

amqp::ContentHeader replay_copy_header(const amqp::ContentHeader& original) {
  amqp::ContentHeader copy = original;
  std::int64_t replays = replays_of(original.properties);
  amqp::FieldTable& headers =
      copy.properties.headers.emplace(original.properties.headers.value_or(amqp::FieldTable{}));
  std::erase_if(headers.entries, [](const auto& entry) {
    return entry.first == guard::kReturnsHeader || entry.first == guard::kDeliveryCountHeader ||
           entry.first == guard::kAcquiredCountHeader;
  });
  std::int64_t next = replays < std::numeric_limits<std::int64_t>::max() ? replays + 1 : replays;
  headers.set(std::string(kReplaysHeader), amqp::FieldValue::i64(next));
  return copy;
}

std::string printable(std::string_view text, std::size_t max_bytes) {
  std::string out(text.substr(0, max_bytes));
  std::replace_if(
      out.begin(), out.end(),
      [](char c) {
        auto byte = static_cast<unsigned char>(c);
        return byte < 0x20 || byte == 0x7F;
      },
      '?');
  if (text.size() > max_bytes) out += "...";
  return out;
}

}  // namespace nackguard::replay
