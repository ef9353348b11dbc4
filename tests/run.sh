#!/usr/bin/env bash
# The single test command: install dependencies, build, start the private
# RabbitMQ nodes (3.10.8, 4.0.5 and 4.3.6), run every test with ctest.
#
#   tests/run.sh [ctest args...]        e.g. tests/run.sh -L unit
#   NACKGUARD_TEST_BROKERS=3.10 tests/run.sh   only the 3.10 node, and every test but those
#                                              against 4.x (named *.rmq40[.*], *.rmq43[.*])
#   NACKGUARD_TEST_BROKERS=4.0 tests/run.sh    only the 4.0 node and the tests against it
#                                              (e.g. integration.test_redelivery.rmq40)
#   NACKGUARD_TEST_BROKERS=3.10,4.3 tests/run.sh  those two nodes and their tests (the ones
#                                              without a version part, and *.rmq43[.*])
#
# Environment:
#   NACKGUARD_BUILD_DIR       build directory (default: build)
#   NACKGUARD_JOBS            parallel build jobs (default: 2)
#   NACKGUARD_INTEGRATION_JOBS  integration tests run at once (default: 4; the other phases 2)
#   NACKGUARD_TEST_BROKERS    which RabbitMQ versions to start and test against, comma-
#                             separated: 3.10, 4.0, 4.3; "all" is the three (the default),
#                             "both" 3.10,4.0 (the default before 4.3 came)
#   NACKGUARD_TEST_KEEP_NODE=1  leave the RabbitMQ nodes running afterwards
#                             (the next run reuses them and saves their boot time)
#   NACKGUARD_TEST_RABBITMQ_FRESH=0  keep the nodes' queues/users from an
#                             earlier run (default: wipe them when starting)
#   NACKGUARD_TEST_NODE, NACKGUARD_TEST_BROKER_PORT, NACKGUARD_TEST_DIST_PORT,
#   NACKGUARD_TEST_EPMD_PORT  the 3.10 node (build/rabbitmq); see tests/rabbitmq-node.sh
#   NACKGUARD_TEST40_{NODE,BROKER_PORT,DIST_PORT,EPMD_PORT}  the 4.0 node (build/rabbitmq-4.0;
#                             nackguard-test40@localhost, 22672, 22673, 22369), and
#   NACKGUARD_TEST43_*        the 4.3 node's (build/rabbitmq-4.3; nackguard-test43@localhost,
#                             24772, 24773, 24369): exported for the tests beside the 3.10
#                             node's NACKGUARD_TEST_* (tests/rabbitmq-versions.sh: defaults)
#   NACKGUARD_TEST_ROOTFS     the Debian 13 root file system the 4.0 node runs in (default:
#                             build/rootfs-trixie), NACKGUARD_TEST43_ROOTFS the Debian sid one
#                             of the 4.3 node (build/rootfs-sid); each built with debootstrap
#                             (about 2 minutes, while the C++ build runs) and kept for the
#                             next run
#   NACKGUARD_TEST_ATTEMPTS   tries a failed test gets in the phases against real brokers
#                             (default 2; see "Passed only on a second try" at the end)
#   NACKGUARD_EXTRA_CHECKS    which checks run after the main suite, comma-separated:
#                             asan (codec, retry and session unit tests and the integration
#                             tests of one broker version, 3.10 unless not wanted, built with
#                             AddressSanitizer and UndefinedBehaviorSanitizer), tsan (the retry tests,
#                             the tracker's threads, under ThreadSanitizer), fuzz (each libFuzzer target for
#                             NACKGUARD_FUZZ_SECONDS, default 40, from the committed corpus).
#                             Default: asan,tsan,fuzz when ctest arguments are not given,
#                             none when they are (tests/run.sh -L unit runs only that).
#
# The exit status is non-zero if any test failed. Each phase prints ctest's summary; the last
# line is the total over all phases: "N passed, N failed".
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

build_dir=${NACKGUARD_BUILD_DIR:-build}
mkdir -p "$build_dir"
build_dir=$(cd "$build_dir" && pwd)
node_dir="$build_dir/rabbitmq"
node_script="$root/tests/rabbitmq-node.sh"
jobs=${NACKGUARD_JOBS:-2}

started_at=$SECONDS
# Each heading carries the minutes:seconds since the start, so a slow phase shows in the log;
# the run ends with each phase's wall time (phase_times), the slowest marked.
phase_names=()
phase_starts=()
mmss() { printf '%d:%02d' $(($1 / 60)) $(($1 % 60)); }
step() {
  phase_names+=("$*")
  phase_starts+=("$SECONDS")
  printf '\n== [%s] %s\n' "$(mmss $((SECONDS - started_at)))" "$*"
}
phase_times() {
  local i n=${#phase_names[@]} end took slowest=0 slowest_i=-1
  ((n > 0)) || return 0
  echo "Phase times (wall; total $(mmss $((SECONDS - started_at)))):"
  for ((i = 0; i < n; i++)); do
    end=$SECONDS
    ((i + 1 < n)) && end=${phase_starts[i + 1]}
    took=$((end - phase_starts[i]))
    if ((took > slowest)); then slowest=$took slowest_i=$i; fi
  done
  for ((i = 0; i < n; i++)); do
    end=$SECONDS
    ((i + 1 < n)) && end=${phase_starts[i + 1]}
    took=$((end - phase_starts[i]))
    printf '  %6s  %s%s\n' "$(mmss "$took")" "${phase_names[i]%% (*}" \
      "$([[ $i == "$slowest_i" ]] && echo '   <- the slowest')"
  done
}

# One run at a time per build directory: concurrent runs would share (and
# stop) each other's node and race on the build.
exec 9>"$build_dir/.tests-run.lock"
if ! flock -n 9; then
  echo "tests/run.sh: another run is using $build_dir; waiting for it" >&2
  flock 9
fi

step "dependencies"
"$root/deploy/install-deps.sh"

# Which versions this run wants (brokers, wants_broker), the ctest filter that goes with them
# (broker_filter), and each version's node (node_dir_of, run_node, cmake_node_args).
# shellcheck source=tests/run-brokers.sh
. "$root/tests/run-brokers.sh"

# Boot the nodes, all at once (5-10 s; a 4.3 node's first boot can take over 90 s, and a 4.x
# node's first run also builds its root file system, about 2 minutes of mostly network) while
# the build runs. A node must not inherit the lock
# (fd 9), or the lock would live as long as the node. Each start's output goes to
# DIR-start.log and its exit status to DIR-start.status.
nodes_started=()  # "version dir" of each node this run started
node_start_pids=()
start_node() { # version dir
  local version=$1 dir=$2
  if run_node "$version" status "$dir" >/dev/null 2>&1 9>&-; then
    echo "tests/run.sh: reusing the RabbitMQ $version node already running in $dir"
    return 0
  fi
  nodes_started+=("$version $dir")
  rm -f "$dir-start.status"
  {
    local t0=$SECONDS status=0
    NACKGUARD_TEST_RABBITMQ_FRESH=${NACKGUARD_TEST_RABBITMQ_FRESH:-1} \
      run_node "$version" start "$dir" || status=$?
    echo "tests/run.sh: the RabbitMQ $version node's start took $((SECONDS - t0))s" \
      "(exit $status)"
    echo "$status" >"$dir-start.status"
  } >"$dir-start.log" 2>&1 9>&- &
  node_start_pids+=($!)
}
for v in "${rabbitmq_versions[@]}"; do
  if wants_broker "$v"; then start_node "$v" "$(node_dir_of "$v")"; fi
done

extras_pid=
stop_node() {
  if [[ -n $extras_pid ]]; then
    # The background builds' process group (setsid below).
    kill -- -"$extras_pid" 2>/dev/null || true
    extras_pid=
  fi
  local p entry
  for p in "${node_start_pids[@]}"; do
    wait "$p" 2>/dev/null || true
  done
  node_start_pids=()
  if [[ ${NACKGUARD_TEST_KEEP_NODE:-0} != 1 ]]; then
    for entry in "${nodes_started[@]}"; do
      run_node "${entry%% *}" stop "${entry#* }" >"${entry#* }-stop.log" 2>&1 9>&- ||
        echo "tests/run.sh: stopping the RabbitMQ ${entry%% *} node failed; see" \
          "${entry#* }-stop.log" >&2
    done
  fi
  nodes_started=()
}
trap stop_node EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

step "configure ($build_dir)"
if [[ -f $build_dir/CMakeCache.txt ]] && grep -q '^CMAKE_BUILD_TYPE:' "$build_dir/CMakeCache.txt"; then
  # Keep the existing cache (build type, options): no rebuild from scratch.
  cmake -S "$root" -B "$build_dir" "${cmake_node_args[@]}"
else
  cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release "${cmake_node_args[@]}"
fi

step "build"
cmake --build "$build_dir" -j"$jobs"

if (($# == 0)); then
  extra_checks=${NACKGUARD_EXTRA_CHECKS-asan,tsan,fuzz}
else
  extra_checks=${NACKGUARD_EXTRA_CHECKS-}
fi
wants() { [[ ,$extra_checks, == *,$1,* ]]; }

# The sanitizer and fuzzer builds run in the background, at the lowest CPU priority, while the
# main suite runs (it mostly waits on the broker); their tests run after it. Each writes
# <dir>/build.log and <dir>/build.status. The AddressSanitizer build, the longest path, is -O1
# with line tables only (-g1), its unit tests' own files -O0 (-O1 -g everywhere took 35 minutes
# of an idle machine). ThreadSanitizer stays at -O2 -g1: at -O1, GCC 12 with -fsanitize=thread
# reports a false -Wmaybe-uninitialized on a std::optional in session_methods.cpp.
asan_dir="$build_dir-asan"
tsan_dir="$build_dir-tsan"
fuzz_dir="$build_dir-fuzz"
build_extra() {
  local dir=$1 status=0
  shift
  mkdir -p "$dir"
  rm -f "$dir/build.status"
  {
    cmake -S "$root" -B "$dir" "${@:2}" && cmake --build "$dir" -j"$jobs" --target $1
  } >"$dir/build.log" 2>&1 || status=$?
  echo "$status" >"$dir/build.status"
}
build_extras() {
  if wants asan; then
    build_extra "$asan_dir" "nackguard unit_amqp unit_retry unit_session" \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNACKGUARD_SANITIZE=address,undefined \
      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" "${cmake_node_args[@]}"
  fi
  if wants tsan; then
    build_extra "$tsan_dir" unit_retry -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1" -DNACKGUARD_SANITIZE=thread
  fi
  if wants fuzz; then
    build_extra "$fuzz_dir" fuzz_targets -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_COMPILER=clang++ -DNACKGUARD_FUZZ=ON \
      -DNACKGUARD_FUZZ_SECONDS="${NACKGUARD_FUZZ_SECONDS:-40}"
  fi
}
if [[ -n $extra_checks ]]; then
  step "sanitizer and fuzzer builds start in the background ($extra_checks)"
  # A build.status left by an earlier run must not pass for this run's (see built()).
  rm -f "$asan_dir/build.status" "$tsan_dir/build.status" "$fuzz_dir/build.status"
  # A session of its own is a CPU group of its own (sched_autogroup), which shared the CPU
  # equally with the tests whatever its nice: its group's nice (/proc/self/autogroup) is 19 too.
  setsid nice -n 19 bash -c "{ echo 19 >/proc/self/autogroup; } 2>/dev/null; \
    $(declare -f build_extra build_extras wants); $(declare -p root jobs extra_checks asan_dir \
    tsan_dir fuzz_dir cmake_node_args); build_extras" 9>&- &
  extras_pid=$!
fi

step "RabbitMQ nodes ($brokers)"
for p in "${node_start_pids[@]}"; do
  wait "$p" || true
done
node_start_pids=()
for entry in "${nodes_started[@]}"; do
  dir=${entry#* }
  cat "$dir-start.log"
  if [[ $(cat "$dir-start.status" 2>/dev/null) != 0 ]]; then
    echo "tests/run.sh: could not start the RabbitMQ ${entry%% *} node ($dir-start.log)" >&2
    exit 1
  fi
done
# Each 4.x node's variables for the tests (NACKGUARD_TEST40_*, NACKGUARD_TEST43_*), beside the
# 3.10 node's NACKGUARD_TEST_* (last, so that they are not overwritten).
for v in 4.0 4.3 3.10; do
  wants_broker "$v" || continue
  rabbitmq_version_settings "$v"
  node_env=$(run_node "$v" env "$(node_dir_of "$v")" 9>&- |
    sed "s/^export NACKGUARD_TEST_/export $rmq_env_prefix/")
  eval "$node_env"
  echo "$node_env"
done

total_passed=0
total_failed=0
failed_names=()
flaky_names=()
# The phases against real brokers give a failed test one more try (NACKGUARD_TEST_ATTEMPTS,
# default 2; 1 turns retries off), and the run ends by naming every test that needed it, so a
# flaky test shows without sinking the run. The ThreadSanitizer and fuzzing phases never
# retry: a race or a crash that shows once is a finding.
attempts=(--repeat "until-pass:${NACKGUARD_TEST_ATTEMPTS:-2}")
failed_output="$build_dir/failed-output.log"
: >"$failed_output"
any_failed=0
# Runs ctest in a build directory and adds its counts to the totals.
run_ctest() {
  local dir=$1
  shift
  local log="$dir/ctest-summary.log" status=0
  ctest --test-dir "$dir" --output-on-failure "$@" 9>&- | tee "$log" || status=$?
  local line passed failed total
  line=$(grep -E '[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -n 1 || true)
  if [[ -n $line ]]; then
    failed=$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\1/' <<<"$line")
    total=$(sed -E 's/.* failed out of ([0-9]+).*/\1/' <<<"$line")
    passed=$((total - failed))
    total_passed=$((total_passed + passed))
    total_failed=$((total_failed + failed))
  elif ((status != 0)); then
    total_failed=$((total_failed + 1))
    failed_names+=("$(basename "$dir"): ctest exited with $status and no summary")
  fi
  # ctest's own list, "  123 - name (Failed)", kept for the end of the run: CI shows only
  # the last lines of the log.
  local name
  while IFS= read -r name; do
    failed_names+=("$(basename "$dir"): $name")
  done < <(sed -n '/^The following tests FAILED:/,/^[^[:space:]]/{/^[[:space:]]/p}' "$log" | sed -E 's/^[[:space:]]+//')
  # And the last lines each failed test printed (--output-on-failure puts them after its
  # status line), for the same reason.
  awk '/ Test +#[0-9]+: .*[*][*][*]/ && !/[*][*][*](Skipped|Not Run)/ { grab = 1; n = 0; print "---- " $0; next }
       grab && (/^ +Start +[0-9]+:/ || /^[0-9]+\/[0-9]+ Test +#/) { grab = 0 }
       grab { buf[n++ % 25] = $0 }
       !grab && n > 0 { for (i = (n > 25 ? n - 25 : 0); i < n; i++) print buf[i % 25]; n = 0 }
       END { for (i = (n > 25 ? n - 25 : 0); i < n; i++) print buf[i % 25] }' "$log" >>"$failed_output"
  # A test with a failed attempt that is not in ctest's list of failures passed on a retry.
  local tried
  while IFS= read -r tried; do
    if ! printf '%s\n' "${failed_names[@]}" | grep -qF -- " - $tried ("; then
      flaky_names+=("$(basename "$dir"): $tried")
    fi
  done < <(grep -E ' Test +#[0-9]+: .*[*][*][*]' "$log" | grep -vE '[*][*][*](Skipped|Not Run)' |
    sed -E 's/.*Test +#[0-9]+: ([^ ]+) .*/\1/' | sort -u)
  ((status == 0)) || any_failed=1
}

if (($# == 0)); then
  # Integration tests 4 at a time: each waits on a broker, on queues of its own (one kept 2
  # cores 6% busier). The rest 2 at a time: compatibility tests start JVMs, fault tests measure
  # memory and time. RUN_SERIAL runs alone ("# ctest-run-serial"); fault modules run one at a
  # time per version (one fault node each); the longest (faults, test_cluster) start first.
  integration_jobs=${NACKGUARD_INTEGRATION_JOBS:-4}
  step "ctest: integration tests (-j$integration_jobs)"
  run_ctest "$build_dir" -j"$integration_jobs" "${attempts[@]}" -L integration \
    "${broker_filter[@]}"
  step "ctest: unit, compatibility, experiment, deployment and benchmark smoke tests (-j2)," \
    "fault tests (one per broker version at a time)"
  run_ctest "$build_dir" -j2 "${attempts[@]}" -LE integration "${broker_filter[@]}"
else
  step "ctest $*"
  run_ctest "$build_dir" "${broker_filter[@]}" "$@"
fi

# Each phase below starts as soon as its own build is done (the builds run one after the
# other in the background), so the sanitizer tests overlap the builds still running.
# A phase whose build failed counts as one failed test and the run goes on.
built() {
  local dir=$1 t0=$SECONDS
  while [[ ! -f $dir/build.status ]] && [[ -n $extras_pid ]] && kill -0 "$extras_pid" 2>/dev/null; do
    sleep 2
  done
  if ((SECONDS - t0 > 2)); then
    echo "tests/run.sh: waited $((SECONDS - t0))s for the build in $dir"
  fi
  if [[ $(cat "$dir/build.status" 2>/dev/null) == 0 ]]; then
    return 0
  fi
  tail -n 60 "$dir/build.log" 2>/dev/null || true
  echo "tests/run.sh: the build in $dir failed; its output is in $dir/build.log" >&2
  total_failed=$((total_failed + 1))
  failed_names+=("build in $dir (see $dir/build.log)")
  any_failed=1
  return 1
}

if wants asan; then
  step "AddressSanitizer and UndefinedBehaviorSanitizer: unit and integration tests"
  if built "$asan_dir"; then
    # The codec, the decisions and the session core, where hostile bytes land, plus every
    # integration test against the sanitized proxy.
    # Two at a time: the integration tests mostly wait (the tsan and fuzz builds may still
    # be running, at the lowest priority).
    asan_tests='^(amqp|retry|session)[.]|^integration[.]'
    # Against one broker version only (CI time: the main phase ran every version): the 3.10
    # node's classic and quorum variants, or the first 4.x version wanted without 3.10. The
    # sanitizers watch the proxy's memory, which the broker's version does not change. Nor
    # test_cluster (2.5 minutes of node stops and starts; test_cluster_replay keeps a cluster).
    asan_filter=(-R "$asan_tests")
    if ! wants_broker 3.10; then
      asan_filter=(-R "^integration[.].*[.](${tags_wanted%%|*})([.]|\$)")
    else
      asan_filter+=(-E "[.](${tags_wanted}${tags_wanted:+${tags_unwanted:+|}}${tags_unwanted})([.]|\$)|^integration[.]test_cluster\$")
    fi
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
      run_ctest "$asan_dir" -j2 "${attempts[@]}" "${asan_filter[@]}"
  fi
fi

if wants tsan; then
  # The retry tests run threads on what connections share; the session's run none (sans-io).
  step "ThreadSanitizer: retry (tracker) tests"
  if built "$tsan_dir"; then
    TSAN_OPTIONS=halt_on_error=1 run_ctest "$tsan_dir" -R '^retry\.'
  fi
fi

if wants fuzz; then
  step "libFuzzer: each target for ${NACKGUARD_FUZZ_SECONDS:-40} s from the committed corpus, two at a time"
  if built "$fuzz_dir"; then
    run_ctest "$fuzz_dir" -j2 -L fuzz  # each target is one process on one core
  fi
fi

# Stop the node now, quietly, so that the totals stay the last output.
stop_node
echo
phase_times
if ((${#flaky_names[@]} > 0)); then
  echo "Passed only on a second try (flaky: find why; the first try's output is in the phase's ctest-summary.log):"
  printf '  %s\n' "${flaky_names[@]}"
fi
if [[ -d $build_dir/test-artifacts ]]; then
  echo "Test artefacts (the /status page's screenshot from test_status_page among them): $build_dir/test-artifacts/"
fi
if ((${#failed_names[@]} > 0)); then
  echo "The last lines each failed test printed (all of it: each build directory's ctest-summary.log):"
  tail -n 120 "$failed_output"
  echo
  echo "Failed:"
  printf '  %s\n' "${failed_names[@]}"
fi
echo "$total_passed passed, $total_failed failed"
exit "$any_failed"
