#pragma once
// Which policy applies to a queue: an exact name beats a glob; among globs, a longer literal
// prefix (the text before the first * or ?) beats a shorter one, then more literal characters
// overall, then the order given. Without a "*" policy, a built-in default applies.

#include <memory>
#include <string_view>
#include <vector>

#include "proxy/retry/policy.hpp"

namespace nackguard::retry {

// `*` matches any run of characters (including none), `?` exactly one.
bool glob_match(std::string_view pattern, std::string_view text);
bool is_glob(std::string_view pattern);

class PolicySet {
 public:
  PolicySet();  // only the built-in default
  // Policies must have distinct `queue` values (the loader reports duplicates with file names).
  explicit PolicySet(std::vector<Policy> policies);

  const Policy& match(std::string_view queue) const;
  const std::vector<Policy>& policies() const { return policies_; }
  const Policy& fallback() const;

 private:
  std::vector<Policy> policies_;  // exact names first, then globs by precedence
  std::size_t exact_count_ = 0;
  Policy builtin_default_;
};

}  // namespace nackguard::retry
