#include "proxy/retry/names.hpp"

#include <xxhash.h>

#include <cstdio>

namespace nackguard::retry {

namespace {

constexpr std::string_view kQueuePlaceholder = "{queue}";

bool is_utf8_continuation(char byte) {
  return (static_cast<unsigned char>(byte) & 0xC0) == 0x80;
}

}  // namespace

std::string fit_name(std::string_view name, std::size_t kept_ending) {
  if (name.size() <= kMaxNameBytes) return std::string(name);
  if (kept_ending > kMaxNameBytes - kNameHashBytes) kept_ending = 0;
  std::size_t prefix = kMaxNameBytes - kNameHashBytes - kept_ending;
  // Never cut inside a multi-byte character: the name must stay valid UTF-8.
  while (prefix > 0 && is_utf8_continuation(name[prefix])) --prefix;
  char hash[kNameHashBytes + 1];
  std::snprintf(hash, sizeof hash, "~%016llx",
                static_cast<unsigned long long>(XXH3_64bits(name.data(), name.size())));
  std::string out(name.substr(0, prefix));
  out.append(hash, kNameHashBytes);
  out.append(name.substr(name.size() - kept_ending));
  return out;
}

std::string dead_letter_routing_key(const DeadLetter& dead_letter, std::string_view queue) {
  std::string_view tmpl = dead_letter.routing_key;
  std::size_t last = tmpl.rfind(kQueuePlaceholder);
  std::size_t ending =
      last == std::string_view::npos ? 0 : tmpl.size() - last - kQueuePlaceholder.size();
  return fit_name(dead_letter.routing_key_for(queue), ending);
}

}  // namespace nackguard::retry
