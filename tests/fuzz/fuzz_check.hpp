#pragma once
// What every fuzz target does with a check's result: a broken property is a crash, with the
// property named on stderr so the crash report says what broke.

#include <cstdio>
#include <cstdlib>

#include "amqp/codec_invariants.hpp"

namespace nackguard::amqp::fuzz {

inline void require(const test::CheckResult& result, const char* target) {
  if (result.broken.empty()) return;
  std::fprintf(stderr, "%s: %s\n", target, result.broken.c_str());
  std::abort();
}

}  // namespace nackguard::amqp::fuzz
