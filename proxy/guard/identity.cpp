#include "proxy/guard/identity.hpp"

#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <limits>

namespace nackguard::guard {

namespace {

const amqp::FieldValue* header(const amqp::BasicProperties& p, std::string_view name) {
  return p.headers ? p.headers->find(name) : nullptr;
}

// A header value as identity text: strings as they are, integers in decimal.
std::optional<std::string> header_text(const amqp::FieldValue* value) {
  if (!value) return std::nullopt;
  if (const std::string* s = value->as_string()) return *s;
  if (auto n = value->as_int()) return std::to_string(*n);
  return std::nullopt;
}

std::string original(const amqp::BasicProperties& p, const char* name, const std::string& actual) {
  if (auto text = header_text(header(p, name))) return *text;
  return actual;
}

std::optional<std::string> from_source(const retry::IdentitySource& source,
                                       const amqp::BasicProperties& p, const Delivery* delivery) {
  using Kind = retry::IdentitySource::Kind;
  switch (source.kind) {
    case Kind::message_id:
      if (p.message_id && !p.message_id->empty()) return "message_id:" + *p.message_id;
      return std::nullopt;
    case Kind::correlation_id:
      if (p.correlation_id && !p.correlation_id->empty()) {
        return "correlation_id:" + *p.correlation_id;
      }
      return std::nullopt;
    case Kind::header:
      if (auto text = header_text(header(p, source.header)); text && !text->empty()) {
        return "header:" + source.header + ":" + *text;
      }
      return std::nullopt;
    case Kind::body: {
      // An unknown hash (DeliveryPlan::hash_body) is no identity, never a shared one.
      if (!delivery || !delivery->body_complete || !delivery->body_hash.known()) {
        return std::nullopt;
      }
      std::string route = original(p, kOriginalExchangeHeader, delivery->exchange);
      route.push_back('\0');
      route += original(p, kOriginalRoutingKeyHeader, delivery->routing_key);
      std::uint64_t hash = XXH3_64bits_withSeed(route.data(), route.size(), delivery->body_hash);
      char hex[17];
      std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash));
      return std::string("body:") + hex;
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> message_identity(const std::vector<retry::IdentitySource>& sources,
                                            const amqp::BasicProperties& properties,
                                            const Delivery& delivery) {
  for (const auto& source : sources) {
    if (auto id = from_source(source, properties, &delivery)) return id;
  }
  return std::nullopt;
}

bool identity_needs_body(const std::vector<retry::IdentitySource>& sources,
                         const amqp::BasicProperties& properties) {
  for (const auto& source : sources) {
    if (source.kind == retry::IdentitySource::Kind::body) return true;
    if (from_source(source, properties, nullptr)) return false;
  }
  return false;
}

namespace {
std::uint32_t count_header(const amqp::BasicProperties& properties, const char* name) {
  const amqp::FieldValue* v = header(properties, name);
  std::optional<std::int64_t> n = v ? v->as_int() : std::nullopt;
  if (!n) return 0;
  return static_cast<std::uint32_t>(
      std::clamp<std::int64_t>(*n, 0, std::numeric_limits<std::uint32_t>::max()));
}
// A boolean header set true, or a non-zero integer (a client's re-encoding may turn one into
// the other).
bool is_true(const amqp::FieldValue* v) {
  if (!v) return false;
  const bool* flag = std::get_if<bool>(&v->value);
  return (flag && *flag) || v->as_int().value_or(0) != 0;
}
}  // namespace

retry::CarriedCount carried_count(const amqp::BasicProperties& properties,
                                  const Delivery& delivery) {
  retry::CarriedCount carried;
  carried.broker = count_header(properties, kDeliveryCountHeader);
  // Only a quorum queue sets either: x-delivery-count from a redelivery on (4.3: of a reject
  // or a crash), x-acquired-count (4.3 on) from any redelivery on.
  carried.from_quorum_queue = header(properties, kDeliveryCountHeader) != nullptr ||
                              header(properties, kAcquiredCountHeader) != nullptr;
  carried.redelivered = delivery.redelivered;
  carried.acquired = count_header(properties, kAcquiredCountHeader);
  if (const amqp::FieldValue* id = header(properties, kCopyIdHeader)) {
    carried.copy_id = static_cast<std::uint64_t>(id->as_int().value_or(0));
  }
  bool counts_here = false;
  if (auto scope = header_text(header(properties, kReturnsQueueHeader))) {
    counts_here = *scope == delivery.queue;
  } else {
    counts_here = header(properties, kReasonHeader) == nullptr;
  }
  if (counts_here) {
    carried.copy = header(properties, kReturnsHeader) != nullptr;
    carried.nackguard = count_header(properties, kReturnsHeader);
    carried.deliveries = count_header(properties, kDeliveriesHeader);
    carried.suspect = is_true(header(properties, kSuspectHeader));
    carried.flag_counts = !is_true(header(properties, kExactHeader));
  }
  return carried;
}

}  // namespace nackguard::guard
