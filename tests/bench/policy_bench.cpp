// PolicySet::match over 50 policies: 30 exact queue names and 20 globs (prefix, suffix, infix
// and `?` patterns, plus "*"). Queue names that hit an exact policy, that fall to a glob, and
// that fall through to "*". The guard caches the policy per queue name (policy_for), so this is
// the cost of a cache miss; figures are recorded in docs/performance.md.

#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "proxy/retry/policy_set.hpp"

namespace nackguard::retry {
namespace {

const std::vector<std::string> kGlobs = {
    "orders.*",         "orders.eu.*",
    "orders.us.*",      "payments.*",
    "payments.?-retry", "*.dlq",
    "*.delay",          "billing.*.invoices",
    "shipping.*",       "shipping.*.labels",
    "celery*",          "celery.task.?",
    "analytics.*.raw",  "events.*",
    "events.user.*",    "notifications.*",
    "tenant-??.*",      "*.audit",
    "legacy.*.*.jobs",  "*",
};

std::vector<Policy> fifty_policies() {
  std::vector<Policy> policies;
  for (int i = 0; i < 30; ++i) {
    Policy p;
    p.queue = "service" + std::to_string(i) + ".work";
    p.max_redeliveries = static_cast<std::uint32_t>(i);
    policies.push_back(p);
  }
  for (const std::string& glob : kGlobs) {
    Policy p;
    p.queue = glob;
    policies.push_back(p);
  }
  return policies;
}

void run_match(benchmark::State& state, const std::vector<std::string>& queues) {
  const PolicySet set(fifty_policies());
  std::size_t i = 0;
  for (auto _ : state) {
    const Policy& p = set.match(queues[i]);
    benchmark::DoNotOptimize(&p);
    if (++i == queues.size()) i = 0;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}

void BM_PolicyMatch_Exact(benchmark::State& state) {
  run_match(state, {"service3.work", "service17.work", "service29.work", "service0.work"});
}
BENCHMARK(BM_PolicyMatch_Exact);

void BM_PolicyMatch_Glob(benchmark::State& state) {
  run_match(state, {"orders.eu.priority", "payments.a-retry", "shipping.fr.labels",
                    "events.user.signup", "tenant-42.reports", "legacy.a.b.jobs"});
}
BENCHMARK(BM_PolicyMatch_Glob);

// Nothing but "*" matches: every glob is tried.
void BM_PolicyMatch_FallThrough(benchmark::State& state) {
  run_match(state, {"amq.gen-JzTY20BRgKO-HjmUJj0wLg", "reports.monthly.pdf-renderer",
                    "service3.work.extra", "x"});
}
BENCHMARK(BM_PolicyMatch_FallThrough);

}  // namespace
}  // namespace nackguard::retry

BENCHMARK_MAIN();
