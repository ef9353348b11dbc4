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
#
# The exit status is ctest's, and ctest's summary is the last thing printed.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

build_dir=${NACKGUARD_BUILD_DIR:-build}
mkdir -p "$build_dir"
build_dir=$(cd "$build_dir" && pwd)
node_dir="$build_dir/rabbitmq"
node_script="$root/tests/rabbitmq-node.sh"
jobs=${NACKGUARD_JOBS:-2}

step() { printf '\n== %s\n' "$*"; }

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

stop_node() {
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

step "ctest"
ctest_status=0
ctest --test-dir "$build_dir" --output-on-failure "$@" 9>&- || ctest_status=$?

# Stop the node now, quietly, so that ctest's summary stays the last output.
stop_node
exit "$ctest_status"
