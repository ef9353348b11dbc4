#include "proxy/metrics/text_format.hpp"

#include <charconv>
#include <cmath>

namespace nackguard::metrics {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// The length of the valid UTF-8 sequence at the start of `s`, or 0 if it is not one.
std::size_t utf8_sequence_length(std::string_view s) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char lead = byte(0);
  std::size_t length = 0;
  unsigned char low = 0x80;
  unsigned char high = 0xBF;
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;   // no overlong forms
    if (lead == 0xED) high = 0x9F;  // no surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;  // nothing above U+10FFFF
  } else {
    return 0;
  }
  if (s.size() < length) return 0;
  if (byte(1) < low || byte(1) > high) return 0;
  for (std::size_t i = 2; i < length; ++i) {
    if (byte(i) < 0x80 || byte(i) > 0xBF) return 0;
  }
  return length;
}

template <typename T>
void append_integer(std::string& out, T value) {
  char buffer[24];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, value);
  (void)ec;  // 24 characters hold any 64-bit integer
  out.append(buffer, end);
}

}  // namespace

void append_label_value(std::string& out, std::string_view value) {
  while (!value.empty()) {
    const char c = value.front();
    switch (c) {
      case '\\':
        out += "\\\\";
        value.remove_prefix(1);
        continue;
      case '"':
        out += "\\\"";
        value.remove_prefix(1);
        continue;
      case '\n':
        out += "\\n";
        value.remove_prefix(1);
        continue;
      default:
        break;
    }
    const std::size_t length = utf8_sequence_length(value);
    if (length == 0) {
      out += kReplacement;
      value.remove_prefix(1);
    } else {
      out.append(value.substr(0, length));
      value.remove_prefix(length);
    }
  }
}

void append_help(std::string& out, std::string_view help) {
  for (const char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
}

void append_value(std::string& out, std::uint64_t value) {
  append_integer(out, value);
}

void append_value(std::string& out, std::int64_t value) {
  append_integer(out, value);
}

void append_value(std::string& out, double value) {
  if (std::isnan(value)) {
    out += "NaN";
  } else if (std::isinf(value)) {
    out += value > 0 ? "+Inf" : "-Inf";
  } else if (value == std::trunc(value) && std::fabs(value) < 9007199254740992.0) {  // 2^53
    append_integer(out, static_cast<std::int64_t>(value));
  } else {
    char buffer[32];
    auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, value);
    (void)ec;  // 32 characters hold the shortest form of any double
    out.append(buffer, end);
  }
}

}  // namespace nackguard::metrics
