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

port_answers() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Waits until 127.0.0.1:$1 accepts connections while process $2 lives.
wait_port() {
  local i
  for ((i = 0; i < 100; i++)); do
    port_answers "$1" && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

# ---- what this script started, stopped on exit ----
node_dir=$build_dir/bench-rabbitmq
node_env=(NACKGUARD_TEST_NODE=nackguard-bench@localhost NACKGUARD_TEST_BROKER_PORT=29672
  NACKGUARD_TEST_DIST_PORT=29673 NACKGUARD_TEST_EPMD_PORT=29369)
node_started=0
nackguard_pid=
haproxy_pid=
candidate_pid=
floor_pid=
cleanup() {
  local status=$? pid
  for pid in "$nackguard_pid" "$haproxy_pid" "$candidate_pid" "$floor_pid"; do
    if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    fi
  done
  if ((node_started)); then
    env "${node_env[@]}" tests/rabbitmq-node.sh stop "$node_dir" >"$work/rabbitmq-stop.log" 2>&1 ||
      say "stopping the RabbitMQ node failed; see $work/rabbitmq-stop.log"
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- TLS: a test PKI (CA, and a server certificate for localhost and 127.0.0.1) ----
pki=$work/pki
tls_args=()
if ((tls)); then
  if [[ ! -s $pki/server.key ]]; then
    say "making a test PKI in $pki"
    /usr/bin/python3 -c 'import sys; sys.path.insert(0, "tests/integration")
import tls_support; tls_support.Pki(sys.argv[1]).make_all()' "$pki" ||
      die "could not make the test PKI (tests/integration/tls_support.py; python3-pika installed?)"
  fi
  cat "$pki/server.pem" "$pki/server.key" >"$pki/server-and-key.pem" # haproxy's crt
  node_env+=("NACKGUARD_TEST_RABBITMQ_CONF_EXTRA=listeners.ssl.default = 127.0.0.1:$broker_tls_port
ssl_options.cacertfile = $pki/ca.pem
ssl_options.certfile = $pki/server.pem
ssl_options.keyfile = $pki/server.key
ssl_options.verify = verify_none")
  tls_args=(--tls-ca "$pki/ca.pem")
fi

# ---- the broker ----
broker_pid=
if [[ -z $broker_port ]]; then
  broker_port=29672
  if ! env "${node_env[@]}" tests/rabbitmq-node.sh status "$node_dir" >/dev/null 2>&1; then
    say "starting a private RabbitMQ node in $node_dir"
    node_started=1
    env "${node_env[@]}" NACKGUARD_TEST_RABBITMQ_FRESH=1 \
      tests/rabbitmq-node.sh start "$node_dir" >"$work/rabbitmq-start.log" 2>&1 9>&- || {
      cat "$work/rabbitmq-start.log" >&2
      die "could not start the RabbitMQ node"
    }
  else
    say "reusing the RabbitMQ node already running in $node_dir"
  fi
  if [[ -s $node_dir/beam.pid ]]; then broker_pid=$(tr -dc 0-9 <"$node_dir/beam.pid"); fi
fi
port_answers "$broker_port" || die "nothing listens on 127.0.0.1:$broker_port"
if ((tls)); then
  port_answers "$broker_tls_port" || die "the RabbitMQ node in $node_dir has no TLS listener on" \
    "127.0.0.1:$broker_tls_port: stop it (tests/rabbitmq-node.sh stop $node_dir, with the" \
    "node's variables) and run again"
  upstream_port=$broker_tls_port
else
  upstream_port=$broker_port
fi

for port in "$nackguard_port" "$metrics_port" "$haproxy_port" "$candidate_port" \
  "$candidate_metrics_port" "$floor_port"; do
  if port_answers "$port"; then
    die "127.0.0.1:$port is in use (another compare.sh, or something else)"
  fi
done

# ---- nackguard: limits so high that every requeue is forwarded ----
cat >"$work/policies/default.yaml" <<'EOF'
# Generated by tests/bench/compare.sh: forward every requeue, dead-letter nothing.
queue: "*"
max_redeliveries: 1000000
rate: {per_message: 1000000, outage_ratio: 1, min_messages: 1000000}
EOF
cat >"$work/nackguard.yaml" <<EOF
# Generated by tests/bench/compare.sh.
listen: {address: 127.0.0.1, port: $nackguard_port$( ((tls)) &&
  echo ", tls: {cert_file: $pki/server.pem, key_file: $pki/server.key}")}
upstream: {host: 127.0.0.1, port: $upstream_port$( ((tls)) &&
  echo ", tls: {ca_file: $pki/ca.pem, server_name: localhost}")}
threads: $proxy_threads
policies_dir: policies
metrics: {address: 127.0.0.1, port: $metrics_port}
log: {level: warn}
shutdown: {grace: 1s}
EOF
# Starts "$@" in the background as $started_pid and waits for 127.0.0.1:$port. A port just
# released may still be held for up to a minute (TIME_WAIT), so a failed bind is retried for
# that long.
start_listener() { # name port log command...
  local name=$1 port=$2 log=$3 attempt
  shift 3
  for ((attempt = 1; attempt <= 35; attempt++)); do
    "$@" >"$log" 2>&1 9>&- &
    started_pid=$!
    wait_port "$port" "$started_pid" && return 0
    kill "$started_pid" 2>/dev/null || true
    wait "$started_pid" 2>/dev/null || true
    say "$name did not start (attempt $attempt): $(tail -n 1 "$log")"
    sleep 2
  done
  cat "$log" >&2
  die "$name did not start"
}
start_listener nackguard "$nackguard_port" "$work/nackguard.log" \
  "$nackguard_bin" --config "$work/nackguard.yaml"
nackguard_pid=$started_pid
if [[ -n $candidate_bin ]]; then
  sed "s/port: $nackguard_port\([,}]\)/port: $candidate_port\1/; s/port: $metrics_port\([,}]\)/port: $candidate_metrics_port\1/
    s/^threads: .*/threads: ${candidate_threads:-$proxy_threads}/" \
    "$work/nackguard.yaml" >"$work/candidate.yaml"
  start_listener candidate "$candidate_port" "$work/candidate.log" \
    "$candidate_bin" --config "$work/candidate.yaml"
  candidate_pid=$started_pid
fi

# ---- haproxy, mode tcp, its own config, in the foreground (-db) ----
cat >"$work/haproxy.cfg" <<EOF
# Generated by tests/bench/compare.sh: a plain TCP relay to the broker.
global
  nbthread $proxy_threads
  maxconn 4096
defaults
  mode tcp
  # A listen section's own limit is 2,000 connections unless set: conn-1000 opens 2,000 at once
  # (the connection that came on top waited unanswered until the client's login timed out).
  maxconn 4096
  timeout connect 5s
  timeout client 1h
  timeout server 1h
listen amqp
  bind 127.0.0.1:$haproxy_port$( ((tls)) && echo " ssl crt $pki/server-and-key.pem")
  server broker 127.0.0.1:$upstream_port$( ((tls)) &&
  echo " ssl verify required ca-file $pki/ca.pem sni str(localhost) verifyhost localhost")
EOF
start_listener haproxy "$haproxy_port" "$work/haproxy.log" haproxy -f "$work/haproxy.cfg" -db
haproxy_pid=$started_pid
if ((floor)); then
  start_listener floor "$floor_port" "$work/floor.log" "$floor_bin" "$floor_port" "$upstream_port"
  floor_pid=$started_pid
fi

# Niceness is per thread: renice every thread of each process.
renice_all() { # pid...
  local pid task
  for pid in "$@"; do
    for task in /proc/"$pid"/task/*; do
      renice -n "$niceness" -p "${task##*/}" >/dev/null 2>&1 || true
    done
  done
}
nice_cmd=()
if [[ -n $niceness ]]; then
  renice_all "$nackguard_pid" "$haproxy_pid" ${candidate_pid:+"$candidate_pid"} \
    ${floor_pid:+"$floor_pid"} \
    ${broker_pid:+"$broker_pid"}
  nice_cmd=(nice -n "$niceness")
  say "niceness $niceness for the broker${broker_pid:+ (pid $broker_pid)}, both proxies and" \
    "the load generator"
fi

sleep 2
idle_rss_kb=$(awk '/^VmRSS:/ {print $2}' "/proc/$nackguard_pid/status")
say "nackguard pid $nackguard_pid (idle RSS ${idle_rss_kb} kB), haproxy pid $haproxy_pid," \
  "broker 127.0.0.1:$broker_port${broker_pid:+ (pid $broker_pid)}"

# ---- scenarios: name, messages (full, smoke), nackguard-bench arguments ----
paired_rate=$latency_rate
((smoke && paired_rate > 1000)) && paired_rate=1000
scenarios=(
  "1k|200000|2000|--size 1024"
  "64k|20000|200|--size 64k"
  "1m|1000|20|--size 1m"
  # The connection curve: 1 KiB over N publishing and N consuming connections, all open
  # together, 100k messages in all (summarize.py: CPU per message and RSS per connection).
  # A smoke count of 0 leaves the scenario out of --smoke: 2,000 connections and as many
  # load-generator threads would load the machine that CI's other tests share.
  "conn-1|100000|200|--size 1024 --connections 1"
  "conn-10|100000|200|--size 1024 --connections 10"
  "conn-100|100000|200|--size 1024 --connections 100"
  "conn-1000|100000|0|--size 1024 --connections 1000"
  "1k-nack10|200000|2000|--size 1024 --nack-fraction 0.1"
  "1k-nack10x2|200000|2000|--size 1024 --nack-fraction 0.1 --nack-times 2"
  "1k-q-nack10|100000|2000|--size 1024 --nack-fraction 0.1 --quorum"
  "latency|50000|1000|--size 1024 --mode concurrent --rate $latency_rate"
  # Every target in one run, message by message in turn (run_paired): one run per round.
  "latency-paired|50000|500|--size 1024 --mode concurrent --rate $paired_rate"
)
targets=(direct nackguard haproxy)
[[ -n $candidate_bin ]] && targets+=(candidate)
((floor)) && targets+=(floor)
target_port() {
  case "$1" in
    direct) echo "$upstream_port" ;;
    nackguard) echo "$nackguard_port" ;;
    candidate) echo "$candidate_port" ;;
    haproxy) echo "$haproxy_port" ;;
    floor) echo "$floor_port" ;;
    all) echo "$upstream_port" ;; # a paired run's setup connection
  esac
}
target_pid() {
  case "$1" in
    nackguard) echo "$nackguard_pid" ;;
    candidate) echo "$candidate_pid" ;;
    haproxy) echo "$haproxy_pid" ;;
    floor) echo "$floor_pid" ;;
  esac
}

selected() {
  [[ -z $only ]] && return 0
  [[ ,$only, == *,$1,* ]] || [[ ,$only, == *,curve,* && $1 == conn-* ]]
}

perf_events=raw_syscalls:sys_enter,context-switches,page-faults
if ((perf)); then
  command -v perf >/dev/null || die "--perf needs perf (Debian's linux-perf)"
  libc=$(ldconfig -p | awk '/libc\.so\.6 .*x86-64/ {print $NF; exit}')
  # (not `perf list | grep -q`: under pipefail, perf's SIGPIPE fails the test)
  if [[ $(perf list 2>/dev/null) != *probe_libc:malloc* ]]; then
    perf probe -q -x "$libc" --add malloc 2>/dev/null || say "no uprobe on malloc: mallocs not counted"
  fi
  [[ $(perf list 2>/dev/null) == *probe_libc:malloc* ]] && perf_events+=,probe_libc:malloc
  : >"$perf_results"
fi

failures=0
# One nackguard-bench run through one target, or through "all" with --targets among the
# arguments (no perf stat then: perf.jsonl counts per target).
run_one() { # scenario target messages args...
  local scenario=$1 target=$2 messages=$3
  shift 3
  local pids=() pid status
  pid=$(target_pid "$target")
  [[ -n $pid ]] && pids+=(--pid "$pid")
  [[ -n $broker_pid ]] && pids+=(--pid "$broker_pid")
  local out perf_pid=
  if ((perf)) && [[ -n $pid ]]; then
    perf stat -x, -e "$perf_events" -p "$pid" -o "$work/perf.txt" 9>&- &
    perf_pid=$!
    sleep 0.2 # perf attaches before the load starts
  fi
  status=0
  out=$("${nice_cmd[@]}" "$bench_bin" --port "$(target_port "$target")" --messages "$messages" \
    --label "$scenario:$target" "${tls_args[@]}" "${pids[@]}" "$@" 9>&- 2>&1) || status=$?
  if [[ -n $perf_pid ]]; then
    kill -INT "$perf_pid" 2>/dev/null || true
    wait "$perf_pid" 2>/dev/null || true
    # perf's CSV: count,unit,event,...; one JSON line per run.
    awk -F, -v label="$scenario:$target" -v n="$messages" '
      $3 != "" && $1 ~ /^[0-9]+$/ { c[$3] = $1 }
      END { printf "{\"label\": \"%s\", \"messages\": %d, \"syscalls\": %d, \"context_switches\": %d, \"page_faults\": %d, \"mallocs\": %s}\n",
              label, n, c["raw_syscalls:sys_enter"], c["context-switches"], c["page-faults"],
              ("probe_libc:malloc" in c) ? c["probe_libc:malloc"] : "null" }' \
      "$work/perf.txt" >>"$perf_results"
  fi
  printf '%s\n' "$out" >>"$run_log"
  grep '^{' <<<"$out" >>"$results" || true
  if ((status != 0)); then
    failures=$((failures + 1))
    say "FAILED $scenario via $target: $(grep -v '^{' <<<"$out" | tail -n 3 | tr '\n' ' ')"
  else
    say "$scenario via $target: $(sed -n 's/^  \(publish\|consume\)  \([0-9]*\) msg\/s.*/\1 \2/p' \
      <<<"$out" | tr '\n' ' ')"
  fi
}

# A paired run: every target in one run, in another order each round. The order fixes whose
# message precedes whose by a fixed share of the period, and that alone moved one binary's
# added p50 by 17 µs between two slots (an A/A run, 2026-12-04): a rotation keeps the cyclic
# order, so each round shuffles it (seeded by the round: the same orders in every run). The
# proxies' --pid come in --targets order (summarize.py charges each one's CPU to its target).
run_paired() { # scenario round messages args...
  local scenario=$1 round=$2 messages=$3 i j target spec='' pid pids=() order=("${targets[@]}")
  shift 3
  RANDOM=$((round * 7919 + 17))
  for ((i = ${#order[@]} - 1; i > 0; i--)); do
    j=$((RANDOM % (i + 1)))
    target=${order[i]} && order[i]=${order[j]} && order[j]=$target
  done
  for target in "${order[@]}"; do
    spec+=${spec:+,}$target=$(target_port "$target")
    pid=$(target_pid "$target")
    [[ -n $pid ]] && pids+=(--pid "$pid")
  done
  run_one "$scenario" all "$messages" "$@" --targets "$spec" "${pids[@]}"
}

for entry in "${scenarios[@]}"; do
  IFS='|' read -r name full tiny args <<<"$entry"
  selected "$name" || continue
  if ((smoke)); then
    ((tiny > 0)) || continue
    messages=$tiny
  else
    messages=$(python3 -c "print(max(1, round($full * $scale)))")
  fi
  read -r -a bench_args <<<"$args"
  for ((round = 0; round < rounds; round++)); do
    if [[ $name == latency-paired ]]; then
      run_paired "$name" "$round" "$messages" "${bench_args[@]}"
      continue
    fi
    # Each round starts with another target, so no target always runs first or last.
    for ((i = 0; i < ${#targets[@]}; i++)); do
      target=${targets[$(((i + round) % ${#targets[@]}))]}
      run_one "$name" "$target" "$messages" "${bench_args[@]}"
    done
  done
done

# ---- soak: RSS of nackguard under a steady load ----
soak_file=$work/soak.tsv
if ((soak > 0)); then
  say "soak: 2000 msg/s of 1 KiB through nackguard for ${soak}s"
  : >"$soak_file"
  (
    start=$SECONDS
    while kill -0 "$nackguard_pid" 2>/dev/null; do
      printf '%s\t%s\n' $((SECONDS - start)) \
        "$(awk '/^VmRSS:/ {print $2}' "/proc/$nackguard_pid/status")" >>"$soak_file"
      sleep 10
    done
  ) &
  sampler=$!
  run_one soak nackguard $((soak * 2000)) --size 1024 --mode concurrent --rate 2000 \
    --timeout $((soak + 600))
  kill "$sampler" 2>/dev/null || true
  wait "$sampler" 2>/dev/null || true
  printf '%s\t%s\n' end "$(awk '/^VmRSS:/ {print $2}' "/proc/$nackguard_pid/status")" \
    >>"$soak_file"
fi

summary_args=(--idle-rss-kb "$idle_rss_kb")
((perf)) && summary_args+=(--perf "$perf_results")
((soak > 0)) && summary_args+=(--soak "$soak_file")
python3 tests/bench/summarize.py "$results" "${summary_args[@]}" | tee "$work/summary.md"
if ((failures > 0)); then
  say "$failures run(s) failed: see $run_log"
  exit 1
fi
