# shellcheck shell=bash disable=SC2034,SC2154  # shares its variables with tests/bench/compare.sh
# tests/bench/compare.sh's runs (sourced by it): the scenarios and the targets each goes
# through, perf's counters, one nackguard-bench run through one target (or all, paired), every
# scenario's rounds, and the soak.

# ---- scenarios: name, messages (full, smoke), nackguard-bench arguments ----
plan_runs() {
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
  if [[ -n $candidate_bin ]]; then targets+=(candidate); fi
  if ((floor)); then targets+=(floor); fi
}

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

setup_perf() {
  perf_events=raw_syscalls:sys_enter,context-switches,page-faults
  if ((perf)); then
    command -v perf >/dev/null || die "--perf needs perf (Debian's linux-perf)"
    libc=$(ldconfig -p | awk '/libc\.so\.6 .*x86-64/ {print $NF; exit}')
    # (not `perf list | grep -q`: under pipefail, perf's SIGPIPE fails the test)
    if [[ $(perf list 2>/dev/null) != *probe_libc:malloc* ]]; then
      perf probe -q -x "$libc" --add malloc 2>/dev/null ||
        say "no uprobe on malloc: mallocs not counted"
    fi
    [[ $(perf list 2>/dev/null) == *probe_libc:malloc* ]] && perf_events+=,probe_libc:malloc
    : >"$perf_results"
  fi
}

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

run_scenarios() {
  local entry name full tiny args messages bench_args round i target
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
}

# ---- soak: RSS of nackguard under a steady load ----
run_soak() {
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
}
