// libFuzzer target fuzz_frame_decoder.
// Arbitrary bytes as a connection's byte stream (optionally after the protocol header),
// decoded whole and again in two reads split at a point taken from the first byte: both must
// give the same frames, and every frame must re-encode to its raw bytes.
// The properties themselves live in tests/unit/amqp/codec_invariants.hpp, shared with the
// unit test that replays the seed corpus.
#include <cstddef>
#include <cstdint>

#include "fuzz_check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace nackguard::amqp;
  fuzz::require(test::check_frame_stream(ByteView(data, size)), "fuzz_frame_decoder");
  return 0;
}
