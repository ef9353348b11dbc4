#include "proxy/config/duration.hpp"

#include <array>
#include <charconv>
#include <cstdint>
#include <limits>
#include <stdexcept>

namespace nackguard::config {
namespace {

struct Unit {
  std::string_view suffix;
  std::int64_t milliseconds;
};

// Largest first, so format_duration picks the shortest spelling.
constexpr std::array kUnits{Unit{"h", 3'600'000}, Unit{"m", 60'000}, Unit{"s", 1'000},
                            Unit{"ms", 1}};

constexpr std::string_view kHowToWrite =
    "write a whole number followed by one of the units ms, s, m, h (e.g. \"500ms\", \"10s\", "
    "\"5m\", \"24h\")";

[[noreturn]] void reject(std::string_view text, std::string_view reason) {
  throw std::invalid_argument("invalid duration \"" + std::string(text) +
                              "\": " + std::string(reason) + "; " + std::string(kHowToWrite));
}

const Unit* find_unit(std::string_view suffix) {
  for (const Unit& unit : kUnits) {
    if (unit.suffix == suffix) return &unit;
  }
  return nullptr;
}

}  // namespace

std::chrono::milliseconds parse_duration(std::string_view text) {
  if (text.empty()) reject(text, "it is empty");
  if (text.front() == '-') reject(text, "a duration cannot be negative");

  std::uint64_t number = 0;
  const char* const end = text.data() + text.size();
  const auto [number_end, error] = std::from_chars(text.data(), end, number);
  if (error == std::errc::invalid_argument) reject(text, "it does not start with a number");
  if (error == std::errc::result_out_of_range) reject(text, "the number is too large");

  const std::string_view suffix(number_end, static_cast<std::size_t>(end - number_end));
  if (suffix.empty()) reject(text, "the unit is missing");
  if (suffix.front() == '.') {
    reject(text,
           "fractions are not supported, use a smaller unit instead (\"1500ms\", not "
           "\"1.5s\")");
  }
  const Unit* unit = find_unit(suffix);
  if (unit == nullptr) reject(text, "unknown unit \"" + std::string(suffix) + "\"");

  constexpr auto kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  if (number > kMax / static_cast<std::uint64_t>(unit->milliseconds)) {
    reject(text, "the duration is too large");
  }
  return std::chrono::milliseconds(static_cast<std::int64_t>(number) * unit->milliseconds);
}

std::string format_duration(std::chrono::milliseconds duration) {
  const std::int64_t ms = duration.count();
  for (const Unit& unit : kUnits) {
    if (ms != 0 && ms % unit.milliseconds == 0) {
      return std::to_string(ms / unit.milliseconds) + std::string(unit.suffix);
    }
  }
  return std::to_string(ms) + "ms";
}

}  // namespace nackguard::config
