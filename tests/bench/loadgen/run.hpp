#pragma once
// One benchmark run: declares the queues, connects every publisher and consumer, then runs the
// publishing and consuming phases while sampling the watched processes, and deletes the queues.

#include "loadgen/options.hpp"
#include "loadgen/report.hpp"

namespace nackguard::bench {

RunResult run_bench(const Options& options);

}  // namespace nackguard::bench
