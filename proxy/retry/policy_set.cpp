#include "proxy/retry/policy_set.hpp"

#include <algorithm>

namespace nackguard::retry {
namespace {

constexpr std::string_view kWildcards = "*?";

Policy make_builtin_default() {
  Policy policy;
  policy.source = "built-in default";
  return policy;
}

// The text before the first wildcard: the more of a name a glob pins down, the more specific.
std::size_t literal_prefix(std::string_view pattern) {
  const auto at = pattern.find_first_of(kWildcards);
  return at == std::string_view::npos ? pattern.size() : at;
}

std::size_t literal_count(std::string_view pattern) {
  return static_cast<std::size_t>(
      std::count_if(pattern.begin(), pattern.end(), [](char c) { return c != '*' && c != '?'; }));
}

}  // namespace

// Greedy matching that remembers only the last `*`: when a later literal fails, that star
// absorbs one more character and matching resumes. Earlier stars never need revisiting, since
// the last star can absorb anything they could. No recursion; O(pattern * text) at worst,
// linear for the patterns queue names use.
bool glob_match(std::string_view pattern, std::string_view text) {
  std::size_t p = 0;
  std::size_t t = 0;
  std::size_t star = std::string_view::npos;  // position in pattern just after the last '*'
  std::size_t star_text = 0;                  // where in text that star's run currently ends
  while (t < text.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = ++p;
      star_text = t;
    } else if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p;
      ++t;
    } else if (star != std::string_view::npos) {
      p = star;
      t = ++star_text;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

bool is_glob(std::string_view pattern) {
  return pattern.find_first_of(kWildcards) != std::string_view::npos;
}

PolicySet::PolicySet() : builtin_default_(make_builtin_default()) {}

PolicySet::PolicySet(std::vector<Policy> policies)
    : policies_(std::move(policies)), builtin_default_(make_builtin_default()) {
  // Exact names first (their order does not matter: they are distinct), then globs from the
  // most specific; stable, so the order given breaks the remaining ties.
  std::stable_sort(policies_.begin(), policies_.end(), [](const Policy& a, const Policy& b) {
    const bool a_glob = is_glob(a.queue);
    const bool b_glob = is_glob(b.queue);
    if (a_glob != b_glob) return !a_glob;
    if (!a_glob) return false;
    const std::size_t a_prefix = literal_prefix(a.queue);
    const std::size_t b_prefix = literal_prefix(b.queue);
    if (a_prefix != b_prefix) return a_prefix > b_prefix;
    return literal_count(a.queue) > literal_count(b.queue);
  });
  exact_count_ = static_cast<std::size_t>(std::count_if(
      policies_.begin(), policies_.end(), [](const Policy& p) { return !is_glob(p.queue); }));
}

const Policy& PolicySet::match(std::string_view queue) const {
  for (std::size_t i = 0; i < exact_count_; ++i) {
    if (policies_[i].queue == queue) return policies_[i];
  }
  for (std::size_t i = exact_count_; i < policies_.size(); ++i) {
    if (glob_match(policies_[i].queue, queue)) return policies_[i];
  }
  return builtin_default_;
}

const Policy& PolicySet::fallback() const {
  for (std::size_t i = exact_count_; i < policies_.size(); ++i) {
    if (policies_[i].queue == "*") return policies_[i];
  }
  return builtin_default_;
}

}  // namespace nackguard::retry
