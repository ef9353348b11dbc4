// nackguard-bench: an AMQP load generator on rabbitmq-c that measures a broker, or a proxy in
// front of it, as the same client sees both. See docs/performance.md.

#include <csignal>
#include <iostream>

#include "loadgen/options.hpp"
#include "loadgen/report.hpp"
#include "loadgen/run.hpp"

int main(int argc, char** argv) {
  using namespace nackguard::bench;
  // A peer that closes while we write must fail the write, not kill the process.
  std::signal(SIGPIPE, SIG_IGN);
  std::optional<Options> options;
  try {
    options = parse_options(argc, argv);
  } catch (const UsageError& e) {
    std::cerr << "nackguard-bench: " << e.what() << " (see --help)\n";
    return 2;
  }
  if (!options) return 0;
  RunResult result = run_bench(*options);
  if (!options->json_only) print_table(std::cout, *options, result);
  print_json(std::cout, *options, result);
  std::cout.flush();
  if (!result.ok) std::cerr << "nackguard-bench: " << result.error << '\n';
  return result.ok ? 0 : 1;
}
