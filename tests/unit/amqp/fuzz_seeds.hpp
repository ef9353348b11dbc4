#pragma once
// The seeds of a fuzz target's corpus (tests/fuzz/corpus/<target>/), sorted by name, for the
// unit tests that replay them through the targets' checks.

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "proxy/amqp/bytes.hpp"

namespace nackguard::amqp::test {

struct Seed {
  std::string name;
  Bytes bytes;
};

inline std::vector<Seed> seeds_of(const std::string& target) {
  std::vector<Seed> seeds;
  namespace fs = std::filesystem;
  fs::path dir = fs::path(NACKGUARD_SOURCE_DIR) / "tests" / "fuzz" / "corpus" / target;
  if (!fs::is_directory(dir)) return seeds;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream file(entry.path(), std::ios::binary);
    seeds.push_back(
        {entry.path().filename().string(), Bytes(std::istreambuf_iterator<char>(file), {})});
  }
  std::sort(seeds.begin(), seeds.end(),
            [](const Seed& a, const Seed& b) { return a.name < b.name; });
  return seeds;
}

}  // namespace nackguard::amqp::test
