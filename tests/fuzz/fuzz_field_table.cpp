// libFuzzer target fuzz_field_table.
// Arbitrary bytes starting with a field table (and, separately, an array): whatever
// decodes must encode back to exactly the bytes it consumed.
// The properties themselves live in tests/unit/amqp/codec_invariants.hpp, shared with the
// unit test that replays the seed corpus.
#include <cstddef>
#include <cstdint>

#include "fuzz_check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace nackguard::amqp;
  fuzz::require(test::check_field_table(ByteView(data, size)), "fuzz_field_table");
  return 0;
}
