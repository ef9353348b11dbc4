#include "proxy/session/consumer_label.hpp"

namespace nackguard::session {

namespace {

// A client property's text, or empty when absent or not a string.
std::string_view property(const amqp::FieldTable& properties, std::string_view name) {
  const amqp::FieldValue* value = properties.find(name);
  const std::string* text = value ? value->as_string() : nullptr;
  return text ? std::string_view(*text) : std::string_view();
}

}  // namespace

std::string_view cut_utf8(std::string_view text, std::size_t max) {
  if (text.size() <= max) return text;
  std::size_t end = max;
  // Back off continuation bytes (10xxxxxx): the cut falls before the character they belong to.
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return text.substr(0, end);
}

std::string client_name(const amqp::FieldTable& client_properties) {
  std::string_view name = property(client_properties, "connection_name");
  if (!name.empty()) return std::string(cut_utf8(name, kMaxConsumerLabel));
  std::string product(property(client_properties, "product"));
  std::string_view version = property(client_properties, "version");
  if (!version.empty()) {
    if (!product.empty()) product += ' ';
    product.append(version);
  }
  return std::string(cut_utf8(product, kMaxConsumerLabel));
}

std::string consumer_label(std::string_view client, std::string_view host) {
  if (client.empty()) client = "unknown client";
  if (host.empty()) return std::string(cut_utf8(client, kMaxConsumerLabel));
  const std::string_view on = " on ";
  host = cut_utf8(host, kMaxConsumerLabel / 2);
  std::string label(cut_utf8(client, kMaxConsumerLabel - on.size() - host.size()));
  label.append(on).append(host);
  return label;
}

}  // namespace nackguard::session
