#include "proxy/config/suggest.hpp"

#include <algorithm>
#include <cctype>
#include <vector>

namespace nackguard::config {
namespace {

std::string lowercase(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Optimal string alignment distance: Levenshtein plus adjacent transpositions, because "prot"
// for "port" is one slip of the fingers, not two.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  const std::size_t columns = b.size() + 1;
  std::vector<std::size_t> d((a.size() + 1) * columns);
  auto at = [&](std::size_t i, std::size_t j) -> std::size_t& { return d[i * columns + j]; };
  for (std::size_t i = 0; i <= a.size(); ++i) at(i, 0) = i;
  for (std::size_t j = 0; j <= b.size(); ++j) at(0, j) = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      at(i, j) = std::min({at(i - 1, j) + 1, at(i, j - 1) + 1, at(i - 1, j - 1) + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        at(i, j) = std::min(at(i, j), at(i - 2, j - 2) + 1);
      }
    }
  }
  return at(a.size(), b.size());
}

// Short prefixes ("l" for "log") match too much to be a useful hint.
constexpr std::size_t kMinPrefix = 3;

bool one_is_prefix_of_other(std::string_view a, std::string_view b) {
  const std::size_t shorter = std::min(a.size(), b.size());
  return shorter >= kMinPrefix && a.substr(0, shorter) == b.substr(0, shorter);
}

}  // namespace

std::optional<std::string> closest_match(std::string_view typed,
                                         std::span<const std::string_view> candidates) {
  const std::string wanted = lowercase(typed);
  std::optional<std::string> best;
  std::size_t best_distance = 0;
  for (std::string_view candidate : candidates) {
    const std::string lowered = lowercase(candidate);
    const std::size_t distance = edit_distance(wanted, lowered);
    // At most one edit per three letters: "thread" -> "threads" is close, "host" -> "port" is
    // not.
    const bool close = distance * 3 <= std::max(wanted.size(), lowered.size()) ||
                       one_is_prefix_of_other(wanted, lowered);
    if (close && (!best || distance < best_distance)) {
      best = std::string(candidate);
      best_distance = distance;
    }
  }
  return best;
}

std::string join(std::span<const std::string_view> items) {
  std::string out;
  for (std::string_view item : items) {
    if (!out.empty()) out += ", ";
    out += item;
  }
  return out;
}

}  // namespace nackguard::config
