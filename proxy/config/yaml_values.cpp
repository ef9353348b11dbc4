#include "proxy/config/yaml_values.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <stdexcept>
#include <system_error>

#include "proxy/config/duration.hpp"
#include "proxy/config/suggest.hpp"

namespace nackguard::config::detail {
namespace {

bool parse_decimal(std::string_view text, std::uint64_t& out) {
  const char* const end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, out);
  return error == std::errc() && stop == end;
}

}  // namespace

std::uint64_t read_integer(const Field& field, std::uint64_t min, std::uint64_t max,
                           std::string_view what) {
  const std::string expected =
      std::string(what) + " from " + std::to_string(min) + " to " + std::to_string(max);
  const std::string text = field.scalar(expected);
  std::uint64_t value = 0;
  if (!parse_decimal(text, value) || value < min || value > max) {
    field.fail("expected " + expected + ", got " + quote(text));
  }
  return value;
}

std::uint16_t read_port(const Field& field) {
  return static_cast<std::uint16_t>(read_integer(field, 1, 65535));
}

std::chrono::milliseconds read_duration(const Field& field, std::chrono::milliseconds min,
                                        std::chrono::milliseconds max) {
  const std::string expected =
      "a duration from " + format_duration(min) + " to " + format_duration(max);
  const std::string text = field.scalar(expected + " such as \"10s\"");
  std::chrono::milliseconds value{};
  try {
    value = parse_duration(text);
  } catch (const std::invalid_argument& error) {
    field.fail(error.what());
  }
  if (value < min || value > max) field.fail("expected " + expected + ", got " + quote(text));
  return value;
}

std::string read_choice(const Field& field, std::span<const std::string_view> choices) {
  const std::string expected = "one of " + join(choices);
  const std::string text = field.scalar(expected);
  if (std::find(choices.begin(), choices.end(), text) != choices.end()) return text;
  std::string message = "expected " + expected + ", got " + quote(text);
  if (const auto suggestion = closest_match(text, choices)) {
    message += " (did you mean \"" + *suggestion + "\"?)";
  }
  field.fail(message);
}

std::string read_word(const Field& field, std::string_view what) {
  const std::string text = field.scalar(what);
  if (text.empty() || text.find_first_of(" \t") != std::string::npos) {
    field.fail("expected " + std::string(what) + ", got " + quote(text));
  }
  return text;
}

// A plain decimal such as 2, 1.5 or 0.2: no exponent, no inf or nan.
std::optional<double> parse_fixed_decimal(std::string_view text) {
  double value = 0;
  const char* const end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value, std::chars_format::fixed);
  if (error != std::errc() || stop != end || !std::isfinite(value)) return std::nullopt;
  return value;
}

// A fraction in (0, 1]; `example` ends the message, e.g. "such as 0.5".
double read_fraction(const Field& field, std::string_view example) {
  std::string expected = "a fraction above 0 and at most 1, ";
  expected.append(example);
  const std::string text = field.scalar(expected);
  const std::optional<double> value = parse_fixed_decimal(text);
  if (value && *value > 0 && *value <= 1) return *value;
  std::string message = "expected " + expected + ", got " + quote(text);
  if (!text.empty() && text.back() == '%') {
    message += "; write a percentage as a fraction (50% is 0.5)";
  }
  field.fail(message);
}

void check_name_length(const Field& field, std::string_view name, std::string_view what) {
  if (name.size() <= 255) return;
  std::string message = "is ";
  message.append(std::to_string(name.size())).append(" bytes long; AMQP ").append(what);
  message.append(" are at most 255 bytes");
  field.fail(message);
}

bool read_bool(const Field& field) {
  static constexpr std::array<std::string_view, 2> kBooleans{"true", "false"};
  return read_choice(field, kBooleans) == "true";
}

}  // namespace nackguard::config::detail
