// libFuzzer target fuzz_session: the session and its guard driven by a script of client and
// broker frames, clock ticks and ends (tests/unit/session/fuzz_script.hpp says what the input
// spells and which properties must hold). A broken property aborts with its name.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "session/fuzz_script.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string broken =
      nackguard::session::fuzz::run_script(nackguard::amqp::ByteView(data, size));
  if (!broken.empty()) {
    std::fprintf(stderr, "fuzz_session: %s\n", broken.c_str());
    std::abort();
  }
  return 0;
}
