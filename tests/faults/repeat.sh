#!/usr/bin/env bash
# Runs one fault test N times in a row and prints a line per run, to show that a case holds
# every time (docs/reliability.md, "The consumer-kill fallback storm").
#
#   tests/faults/repeat.sh N TEST_METHOD [MODULE]       e.g.
#   tests/faults/repeat.sh 20 test_consumer_killed_holding_unacked_and_delayed
#
# MODULE defaults to test_process_faults. The build directory is NACKGUARD_BUILD_DIR (default
# build; it must hold a built nackguard), the broker NACKGUARD_FAULTS_RABBITMQ_VERSION (3.10,
# 4.0 or 4.3) and the queue type NACKGUARD_TEST_QUEUE_TYPE (classic or quorum), as for ctest's fault
# tests. Each run's output goes to BUILD/faults-repeat/MODULE.TEST_METHOD.K.log.
set -euo pipefail
[[ $# -ge 2 ]] || { sed -n '2,11p' "$0" >&2; exit 2; }
runs=$1 method=$2 module=${3:-test_process_faults}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$(cd "${NACKGUARD_BUILD_DIR:-$root/build}" && pwd)
logs="$build/faults-repeat"
mkdir -p "$logs"
passed=0 failed=0
cd "$root/tests/faults"
for ((i = 1; i <= runs; i++)); do
  log="$logs/$module.$method.$i.log"
  if NACKGUARD_BIN="$build/nackguard" NACKGUARD_BUILD_DIR="$build" PYTHONDONTWRITEBYTECODE=1 \
    NACKGUARD_FAULTS_RABBITMQ_VERSION=${NACKGUARD_FAULTS_RABBITMQ_VERSION:-3.10} \
    NACKGUARD_TEST_QUEUE_TYPE=${NACKGUARD_TEST_QUEUE_TYPE:-classic} \
    /usr/bin/python3 -m unittest -k "$method" "$module" >"$log" 2>&1; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
  fi
  echo "$(date -u +%T) run $i of $runs: $passed passed, $failed failed ($log)"
done
((failed == 0))
