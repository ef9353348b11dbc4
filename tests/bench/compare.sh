#!/usr/bin/env bash
# Runs the same AMQP load against three targets, alternating, and prints medians and ratios:
#   direct     the RabbitMQ broker itself
#   nackguard  build/nackguard in front of it (a policy with limits so high nothing is
#              dead-lettered or delayed)
#   candidate  with --candidate BIN, another nackguard binary with the same configuration (a
#              build to compare with, e.g. another backend or the code before a change)
#   haproxy    Debian's haproxy in mode tcp in front of it (a plain TCP relay)
#   floor      with --floor, build/nackguard-floor-relay in front of it: one recv() and one
#              send() per readiness event, nothing parsed, nothing allocated (the least a
#              user-space relay costs on this kernel; tests/bench/floor_relay.cpp)
#
#   tests/bench/compare.sh [--build-dir DIR] [--broker-port PORT] [--rounds N] [--scale F]
#                          [--only LIST] [--proxy-threads N] [--soak SECONDS] [--nice N]
#                          [--candidate BIN] [--candidate-threads N] [--floor] [--perf]
#                          [--tls] [--latency-rate R] [--smoke]
#
#   --build-dir DIR     holds nackguard and nackguard-bench (default: build)
#   --broker-port PORT  use the broker already listening on 127.0.0.1:PORT; otherwise a private
#                       node is started (tests/rabbitmq-node.sh: nackguard-bench@localhost,
#                       AMQP 29672, dist 29673, epmd 29369, in DIR/bench-rabbitmq) and stopped
#   --rounds N          rounds per scenario, each running every target once (default 3)
#   --scale F           multiplies every scenario's message count (e.g. 0.5)
#   --only LIST         comma-separated scenarios among 1k 64k 1m conn-1 conn-10 conn-100
#                       conn-1000 1k-nack10 1k-nack10x2 1k-q-nack10 latency latency-paired,
#                       "curve" for the four
#                       conn-N, or "none" (with --soak). Without it, every scenario runs.
#                       latency: 1 KiB at --latency-rate, consumers running while publishers
#                       publish, one target per run. latency-paired: the same load through
#                       every target in ONE run per round (nackguard-bench --targets), message
#                       by message in turn, so that every target sees the same machine state;
#                       each target's added latency is against direct in the same run
#   --proxy-threads N   threads of nackguard and of haproxy (default 1)
#   --soak SECONDS      afterwards, a steady 1 KiB load through nackguard for this long,
#                       sampling its RSS every 10 s
#   --nice N            run the broker (every thread, when its pid is known), both proxies
#                       and the load generator at this niceness, e.g. -20 (root) to shield
#                       them from other work on a shared machine
#   --candidate BIN     a fourth target, in every round: BIN run as nackguard is, on 31683
#                       (metrics 31684)
#   --candidate-threads N  the candidate's `threads` (default: --proxy-threads); with
#                       --candidate DIR/nackguard, compares thread counts of one binary
#   --floor             a fifth target, in every round: nackguard-floor-relay on 31685
#   --tls               TLS on both sides of every proxy, and to the broker directly: the
#                       private node gets a TLS listener on 29671 with a test PKI
#                       (tests/integration/tls_support.py, in DIR/bench-compare/pki); nackguard
#                       terminates and re-originates TLS (listen.tls, upstream.tls), and so does
#                       haproxy (bind ... ssl, server ... ssl verify required). Not with --floor
#                       or --broker-port
#   --perf              count each proxy's system calls, context switches, page faults and
#                       malloc calls
#                       during each run with perf stat (tracepoints raw_syscalls:sys_enter,
#                       context-switches, page-faults and a uprobe on libc's malloc that it adds if
#                       missing), into DIR/bench-compare/perf.jsonl: per message in the summary
#   --latency-rate R    the latency scenarios' messages per second (default 5000; in all,
#                       shared by the targets, for latency-paired): lower it when the machine
#                       is slow enough that the targets queue for a CPU at 5,000 (with --scale,
#                       to keep each run short)
#   --smoke             tiny sizes, one round, every scenario but conn-1000 (latency-paired at
#                       1,000 msg/s at most): exits non-zero if a target fails to move every
#                       message (registered with CTest, label bench)
#
# Every run's JSON line goes to DIR/bench-compare/results.jsonl, its table to run.log there.
# Ports on 127.0.0.1: nackguard 31680 (metrics 31681), haproxy 31682, the candidate 31683
# (metrics 31684), the floor relay 31685: below Linux's ephemeral
# range (32768-60999), so that no outgoing connection of another program holds them.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"

build_dir=build
broker_port=
rounds=3
scale=1
latency_rate=5000
only=
proxy_threads=1
soak=0
smoke=0
niceness=
nackguard_port=31680
metrics_port=31681
haproxy_port=31682
candidate_bin=
candidate_threads=
perf=0
candidate_port=31683
candidate_metrics_port=31684
floor=0
tls=0
broker_tls_port=29671
floor_port=31685

die() { echo "compare.sh: $*" >&2; exit 2; }
while (($#)); do
  case "$1" in
    --build-dir) build_dir=${2:?}; shift 2 ;;
    --broker-port) broker_port=${2:?}; shift 2 ;;
    --rounds) rounds=${2:?}; shift 2 ;;
    --scale) scale=${2:?}; shift 2 ;;
    --latency-rate) latency_rate=${2:?}; shift 2 ;;
    --only) only=${2:?}; shift 2 ;;
    --proxy-threads) proxy_threads=${2:?}; shift 2 ;;
    --soak) soak=${2:?}; shift 2 ;;
    --nice) niceness=${2:?}; shift 2 ;;
    --candidate) candidate_bin=${2:?}; shift 2 ;;
    --candidate-threads) candidate_threads=${2:?}; shift 2 ;;
    --floor) floor=1; shift ;;
    --tls) tls=1; shift ;;
    --perf) perf=1; shift ;;
    --smoke) smoke=1; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[[ $rounds =~ ^[1-9][0-9]*$ ]] || die "--rounds must be a positive whole number"
[[ $proxy_threads =~ ^[1-9][0-9]*$ ]] || die "--proxy-threads must be a positive whole number"
[[ -z $candidate_threads || $candidate_threads =~ ^[1-9][0-9]*$ ]] ||
  die "--candidate-threads must be a positive whole number"
[[ $soak =~ ^[0-9]+$ ]] || die "--soak takes whole seconds"
[[ $latency_rate =~ ^[1-9][0-9]*$ ]] || die "--latency-rate must be a positive whole number"
[[ -z $broker_port || $broker_port =~ ^[0-9]+$ ]] || die "--broker-port must be a port number"
[[ -z $niceness || $niceness =~ ^-?[0-9]+$ ]] || die "--nice takes a whole number"
((smoke)) && rounds=1
((tls && floor)) && die "--tls and --floor: the floor relay has no TLS"
((tls)) && [[ -n $broker_port ]] && die "--tls needs the private node (no --broker-port)"

mkdir -p "$build_dir"
build_dir=$(cd "$build_dir" && pwd)
nackguard_bin=$build_dir/nackguard
bench_bin=$build_dir/nackguard-bench
[[ -z $candidate_bin || -x $candidate_bin ]] || die "--candidate $candidate_bin: not an executable"
floor_bin=$build_dir/nackguard-floor-relay
((floor)) || floor_bin=
for bin in "$nackguard_bin" "$bench_bin" $floor_bin; do
  [[ -x $bin ]] || die "$bin not found: cmake --build $build_dir --target nackguard nackguard-bench"
done
command -v haproxy >/dev/null || die "haproxy not found: deploy/install-deps.sh installs it"
command -v python3 >/dev/null || die "python3 not found: deploy/install-deps.sh installs it"

work=$build_dir/bench-compare
mkdir -p "$work/policies"
exec 9>"$work/.lock"
flock -n 9 || die "another compare.sh is running on $build_dir"
results=$work/results.jsonl
run_log=$work/run.log
perf_results=$work/perf.jsonl
: >"$results"
: >"$run_log"

say() { printf 'compare.sh: %s\n' "$*" >&2; }

# The targets (the broker, the proxies: started, configured, stopped on exit) and the runs
# (the scenarios, one nackguard-bench run through one target, the soak), beside this script.
here=$root/tests/bench
# shellcheck source=tests/bench/compare-targets.sh
. "$here/compare-targets.sh"
# shellcheck source=tests/bench/compare-runs.sh
. "$here/compare-runs.sh"

# ---- what this script started, stopped on exit (cleanup) ----
node_dir=$build_dir/bench-rabbitmq
node_env=(NACKGUARD_TEST_NODE=nackguard-bench@localhost NACKGUARD_TEST_BROKER_PORT=29672
  NACKGUARD_TEST_DIST_PORT=29673 NACKGUARD_TEST_EPMD_PORT=29369)
node_started=0
nackguard_pid=
haproxy_pid=
candidate_pid=
floor_pid=
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

setup_tls
start_broker
check_ports_free
write_nackguard_config
start_proxies
apply_niceness

sleep 2
idle_rss_kb=$(awk '/^VmRSS:/ {print $2}' "/proc/$nackguard_pid/status")
say "nackguard pid $nackguard_pid (idle RSS ${idle_rss_kb} kB), haproxy pid $haproxy_pid," \
  "broker 127.0.0.1:$broker_port${broker_pid:+ (pid $broker_pid)}"

plan_runs
setup_perf
failures=0
run_scenarios
run_soak

summary_args=(--idle-rss-kb "$idle_rss_kb")
((perf)) && summary_args+=(--perf "$perf_results")
((soak > 0)) && summary_args+=(--soak "$soak_file")
python3 tests/bench/summarize.py "$results" "${summary_args[@]}" | tee "$work/summary.md"
if ((failures > 0)); then
  say "$failures run(s) failed: see $run_log"
  exit 1
fi
