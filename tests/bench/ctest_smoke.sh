#!/usr/bin/env bash
# CTest's entry for the bench smoke: compare.sh --smoke on the build directory $1, against
# tests/run.sh's RabbitMQ node when NACKGUARD_TEST_BROKER_PORT names it (else compare.sh starts
# a private node of its own). With "tls" as $2: TLS on both sides, on a private node that
# compare.sh starts with a TLS listener (and stops).
set -euo pipefail
if [[ ${2:-} == tls ]]; then
  exec "$(dirname "${BASH_SOURCE[0]}")/compare.sh" --smoke --tls --build-dir "$1"
fi
args=(--smoke --floor --build-dir "$1")
if [[ -n ${NACKGUARD_TEST_BROKER_PORT:-} ]]; then
  args+=(--broker-port "$NACKGUARD_TEST_BROKER_PORT")
fi
exec "$(dirname "${BASH_SOURCE[0]}")/compare.sh" "${args[@]}"
