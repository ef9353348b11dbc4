#include "proxy/config/yaml_values.hpp"

#include <algorithm>
#include <charconv>
#include <stdexcept>

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

}  // namespace nackguard::config::detail
