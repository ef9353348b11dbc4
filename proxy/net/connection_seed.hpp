#pragma once
// The seed of a connection's guard (its copy ids, its backoff jitter): drawn from the system's
// randomness once per process and mixed with the connection's number, so that no two
// sidecars, nor a sidecar and its restart, make the same copy ids (x-nackguard-copy-id tells a
// copy from another: equal ids in two sidecars would pass one copy's cached count for
// another's).

#include <cstdint>
#include <random>

namespace nackguard::net {

// SplitMix64's finaliser: consecutive inputs give unrelated outputs.
inline std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

inline std::uint64_t process_seed() {
  static const std::uint64_t seed = [] {
    std::random_device device;
    return (std::uint64_t{device()} << 32) ^ std::uint64_t{device()};
  }();
  return seed;
}

inline std::uint64_t connection_seed(std::uint64_t connection_id) {
  return mix64(process_seed() ^ mix64(connection_id));
}

}  // namespace nackguard::net
