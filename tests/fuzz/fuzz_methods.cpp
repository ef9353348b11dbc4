// libFuzzer target fuzz_methods.
// Arbitrary bytes as a method frame payload, decoded as every method struct in methods.hpp:
// at most the one whose key it carries may accept it, and that one must come back equal
// after encode -> decode.
// The properties themselves live in tests/unit/amqp/codec_invariants.hpp, shared with the
// unit test that replays the seed corpus.
#include <cstddef>
#include <cstdint>

#include "fuzz_check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace nackguard::amqp;
  fuzz::require(test::check_methods(ByteView(data, size)), "fuzz_methods");
  return 0;
}
