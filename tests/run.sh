#!/usr/bin/env bash
# The single test command: install dependencies, build, start a private
# RabbitMQ node, run every test with ctest.
#
#   tests/run.sh [ctest args...]        e.g. tests/run.sh -L unit
#
# Environment:
#   NACKGUARD_BUILD_DIR       build directory (default: build)
#   NACKGUARD_JOBS            parallel build jobs (default: 2)
#   NACKGUARD_TEST_KEEP_NODE=1  leave the RabbitMQ node running afterwards
#                             (the next run reuses it and saves its boot time)
#   NACKGUARD_TEST_RABBITMQ_FRESH=0  keep the node's queues/users from an
#                             earlier run (default: wipe them when starting)
#   NACKGUARD_TEST_NODE, NACKGUARD_TEST_BROKER_PORT, NACKGUARD_TEST_DIST_PORT,
#   NACKGUARD_TEST_EPMD_PORT  see tests/rabbitmq-node.sh
#   NACKGUARD_EXTRA_CHECKS    which checks run after the main suite, comma-separated:
#                             asan (codec, retry and session unit tests and the integration
#                             tests, built with AddressSanitizer and UndefinedBehaviorSanitizer), tsan (tracker and session
#                             tests under ThreadSanitizer), fuzz (each libFuzzer target for
#                             NACKGUARD_FUZZ_SECONDS, default 60, from the committed corpus).
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
# Each heading carries the minutes:seconds since the start, so a slow phase shows in the log.
step() { printf '\n== [%d:%02d] %s\n' $(((SECONDS - started_at) / 60)) $(((SECONDS - started_at) % 60)) "$*"; }

# One run at a time per build directory: concurrent runs would share (and
# stop) each other's node and race on the build.
exec 9>"$build_dir/.tests-run.lock"
if ! flock -n 9; then
  echo "tests/run.sh: another run is using $build_dir; waiting for it" >&2
  flock 9
fi

step "dependencies"
"$root/deploy/install-deps.sh"

# Boot the node (5-10 s) while the build runs. The node must not inherit the
# lock (fd 9), or the lock would live as long as the node.
node_started=0
node_start_pid=
node_start_log="$build_dir/rabbitmq-start.log"
if "$node_script" status "$node_dir" >/dev/null 2>&1 9>&-; then
  echo "tests/run.sh: reusing the RabbitMQ node already running in $node_dir"
else
  node_started=1
  NACKGUARD_TEST_RABBITMQ_FRESH=${NACKGUARD_TEST_RABBITMQ_FRESH:-1} \
    "$node_script" start "$node_dir" >"$node_start_log" 2>&1 9>&- &
  node_start_pid=$!
fi

extras_pid=
stop_node() {
  if [[ -n $extras_pid ]]; then
    # The background builds' process group (setsid below).
    kill -- -"$extras_pid" 2>/dev/null || true
    extras_pid=
  fi
  if [[ -n $node_start_pid ]]; then
    wait "$node_start_pid" 2>/dev/null || true
    node_start_pid=
  fi
  if ((node_started)) && [[ ${NACKGUARD_TEST_KEEP_NODE:-0} != 1 ]]; then
    node_started=0
    "$node_script" stop "$node_dir" >"$build_dir/rabbitmq-stop.log" 2>&1 9>&- ||
      echo "tests/run.sh: stopping the RabbitMQ node failed; see $build_dir/rabbitmq-stop.log" >&2
  fi
}
trap stop_node EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

step "configure ($build_dir)"
if [[ -f $build_dir/CMakeCache.txt ]] && grep -q '^CMAKE_BUILD_TYPE:' "$build_dir/CMakeCache.txt"; then
  # Keep the existing cache (build type, options): no rebuild from scratch.
  cmake -S "$root" -B "$build_dir"
else
  cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release
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
# main suite runs (it mostly waits on the broker): their tests run after it. Each build writes
# its output to <dir>/build.log and its exit status to <dir>/build.status.
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
      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g"
  fi
  if wants tsan; then
    build_extra "$tsan_dir" "unit_retry unit_session" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DNACKGUARD_SANITIZE=thread
  fi
  if wants fuzz; then
    build_extra "$fuzz_dir" fuzz_targets -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_COMPILER=clang++ -DNACKGUARD_FUZZ=ON \
      -DNACKGUARD_FUZZ_SECONDS="${NACKGUARD_FUZZ_SECONDS:-60}"
  fi
}
if [[ -n $extra_checks ]]; then
  step "sanitizer and fuzzer builds start in the background ($extra_checks)"
  setsid nice -n 19 bash -c "$(declare -f build_extra build_extras wants); $(declare -p root jobs \
    extra_checks asan_dir tsan_dir fuzz_dir); build_extras" 9>&- &
  extras_pid=$!
fi

step "RabbitMQ node ($node_dir)"
if [[ -n $node_start_pid ]]; then
  node_start_status=0
  wait "$node_start_pid" || node_start_status=$?
  node_start_pid=
  cat "$node_start_log"
  if ((node_start_status != 0)); then
    echo "tests/run.sh: could not start the RabbitMQ node" >&2
    exit "$node_start_status"
  fi
fi
node_env=$("$node_script" env "$node_dir" 9>&-)
eval "$node_env"
echo "$node_env"

total_passed=0
total_failed=0
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
  fi
  ((status == 0)) || any_failed=1
}


step "ctest"
run_ctest "$build_dir" "$@"

if [[ -n $extras_pid ]]; then
  step "waiting for the sanitizer and fuzzer builds"
  wait "$extras_pid" || true
  extras_pid=
fi

# A phase whose build failed counts as one failed test and the run goes on.
built() {
  local dir=$1
  if [[ $(cat "$dir/build.status" 2>/dev/null) == 0 ]]; then
    return 0
  fi
  tail -n 60 "$dir/build.log" 2>/dev/null || true
  echo "tests/run.sh: the build in $dir failed; its output is in $dir/build.log" >&2
  total_failed=$((total_failed + 1))
  any_failed=1
  return 1
}

if wants asan; then
  step "AddressSanitizer and UndefinedBehaviorSanitizer: unit and integration tests"
  if built "$asan_dir"; then
    # The codec, the decisions and the session core, where hostile bytes land, plus every
    # integration test against the sanitized proxy.
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
      run_ctest "$asan_dir" -R '^(amqp|retry|session)[.]|^integration[.]'
  fi
fi

if wants tsan; then
  step "ThreadSanitizer: tracker and session tests"
  if built "$tsan_dir"; then
    TSAN_OPTIONS=halt_on_error=1 run_ctest "$tsan_dir" -R '^(retry|session)\.'
  fi
fi

if wants fuzz; then
  step "libFuzzer: each target for ${NACKGUARD_FUZZ_SECONDS:-60} s from the committed corpus"
  if built "$fuzz_dir"; then
    run_ctest "$fuzz_dir" -L fuzz
  fi
fi

# Stop the node now, quietly, so that the totals stay the last output.
stop_node
echo
echo "$total_passed passed, $total_failed failed"
exit "$any_failed"
