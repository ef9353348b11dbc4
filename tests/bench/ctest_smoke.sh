#!/usr/bin/env bash
# CTest's entry for the bench smoke: compare.sh --smoke on the build directory $1, against
# tests/run.sh's RabbitMQ node when NACKGUARD_TEST_BROKER_PORT names it (else compare.sh starts
# a private node of its own).
set -euo pipefail
args=(--smoke --build-dir "$1")
if [[ -n ${NACKGUARD_TEST_BROKER_PORT:-} ]]; then
  args+=(--broker-port "$NACKGUARD_TEST_BROKER_PORT")
fi
exec "$(dirname "${BASH_SOURCE[0]}")/compare.sh" "${args[@]}"
