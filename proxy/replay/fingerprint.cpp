#include "proxy/replay/fingerprint.hpp"

#include "proxy/replay/rewrite.hpp"

namespace nackguard::replay {

namespace {

// Fed field by field, each with its length first, so that fields cannot run into each other.
class Fnv1a {
 public:
  void add(amqp::ByteView bytes) {
    add_u64(bytes.size());
    for (std::uint8_t b : bytes) mix(b);
  }
  void add(const std::optional<std::string>& text) {
    mix(text ? 1 : 0);
    if (text) add(amqp::as_bytes(*text));
  }
  void add_u64(std::uint64_t v) {
    for (int shift = 0; shift < 64; shift += 8) mix(static_cast<std::uint8_t>(v >> shift));
  }
  std::uint64_t value() const { return hash_; }

 private:
  void mix(std::uint8_t b) {
    hash_ ^= b;
    hash_ *= 0x100000001b3ull;
  }
  std::uint64_t hash_ = 0xcbf29ce484222325ull;
};

}  // namespace

std::uint64_t fingerprint(const amqp::ContentHeader& header, amqp::ByteView body) {
  const amqp::BasicProperties& p = header.properties;
  Fnv1a hash;
  hash.add(p.message_id);
  hash.add(p.correlation_id);
  hash.add_u64(p.timestamp ? *p.timestamp + 1 : 0);
  hash.add_u64(static_cast<std::uint64_t>(replays_of(p)));
  hash.add(body);
  return hash.value();
}

}  // namespace nackguard::replay
