// libFuzzer target fuzz_content_header.
// Arbitrary bytes as a content header frame payload: whatever decodes must encode back to
// the same bytes, and peek_body_size() must agree with it.
// The properties themselves live in tests/unit/amqp/codec_invariants.hpp, shared with the
// unit test that replays the seed corpus.
#include <cstddef>
#include <cstdint>

#include "fuzz_check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace nackguard::amqp;
  fuzz::require(test::check_content_header(ByteView(data, size)), "fuzz_content_header");
  return 0;
}
