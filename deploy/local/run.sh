#!/usr/bin/env bash
# Try nackguard on a fresh Debian 12 machine:
#
#   deploy/local/run.sh [extra nackguard args...]
#
# 1. installs the packages (deploy/install-deps.sh),
# 2. builds a Release binary into build/ (kept between runs),
# 3. uses the RabbitMQ broker answering on the upstream address of the config
#    (127.0.0.1:5672); if none answers, starts a private node for you under
#    build/local-rabbitmq (node nackguard-local@localhost, AMQP 127.0.0.1:5672,
#    Erlang distribution 25673, its own epmd on 24369; all on loopback),
# 4. runs build/nackguard --config conf/nackguard.yaml in the foreground.
#
# Ctrl-C stops the proxy, and the RabbitMQ node if this script started it.
#
# Environment: NACKGUARD_CONFIG (default conf/nackguard.yaml),
# NACKGUARD_BUILD_DIR (default build), NACKGUARD_JOBS (default 2).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"

config=${NACKGUARD_CONFIG:-conf/nackguard.yaml}
build_dir=${NACKGUARD_BUILD_DIR:-build}
jobs=${NACKGUARD_JOBS:-2}
node_dir="$build_dir/local-rabbitmq"
node_script="$root/tests/rabbitmq-node.sh"
# The private node, if one is needed (see tests/rabbitmq-node.sh).
export NACKGUARD_TEST_NODE=nackguard-local@localhost
export NACKGUARD_TEST_DIST_PORT=25673
export NACKGUARD_TEST_EPMD_PORT=24369
unset NACKGUARD_TEST_RABBITMQ_FRESH NACKGUARD_TEST_RABBITMQ_CONF_EXTRA

say() { echo "deploy/local/run.sh: $*" >&2; }

[[ -f $config ]] || { say "no config file $config"; exit 1; }

# Reads `key:` inside the top-level `section:` of the YAML config (simple
# "key: value  # comment" lines, as in conf/nackguard.yaml).
yaml_get() {
  awk -v section="$1" -v key="$2" '
    /^[^[:space:]#][^:]*:/ { in_section = ($0 ~ "^" section ":") ; next }
    in_section && $0 ~ "^[[:space:]]+" key ":" {
      sub("^[[:space:]]+" key ":[[:space:]]*", ""); sub("[[:space:]]*#.*$", "")
      gsub("[\"'\'']", ""); print; exit
    }' "$config"
}
listen_address=$(yaml_get listen address)
listen_port=$(yaml_get listen port)
upstream_host=$(yaml_get upstream host)
upstream_port=$(yaml_get upstream port)
listen_address=${listen_address:-127.0.0.1}
listen_port=${listen_port:-5673}
upstream_host=${upstream_host:-127.0.0.1}
upstream_port=${upstream_port:-5672}

# shellcheck disable=SC2016 # $1 and $2 expand in the inner bash
answers() { timeout 2 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$1" "$2" 2>/dev/null; }

"$root/deploy/install-deps.sh"

if [[ -f $build_dir/CMakeCache.txt ]] && grep -q '^CMAKE_BUILD_TYPE:' "$build_dir/CMakeCache.txt"; then
  cmake -S "$root" -B "$build_dir"
else
  cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release
fi
cmake --build "$build_dir" -j"$jobs" --target nackguard

node_started=0
proxy_pid=
# shellcheck disable=SC2317 # called by the traps
cleanup() {
  trap - EXIT INT TERM
  if [[ -n $proxy_pid ]] && kill -0 "$proxy_pid" 2>/dev/null; then
    say "stopping nackguard (pid $proxy_pid)"
    kill -TERM "$proxy_pid" 2>/dev/null || true
    for _ in 1 2 3 4 5 6 7 8 9 10; do
      kill -0 "$proxy_pid" 2>/dev/null || break
      sleep 0.5
    done
    kill -KILL "$proxy_pid" 2>/dev/null || true
    wait "$proxy_pid" 2>/dev/null || true
  fi
  if ((node_started)); then
    NACKGUARD_TEST_BROKER_PORT=$upstream_port "$node_script" stop "$node_dir" || true
  fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if answers "$upstream_host" "$upstream_port"; then
  say "a broker answers on $upstream_host:$upstream_port; using it"
elif [[ $upstream_host == 127.0.0.1 || $upstream_host == localhost ]]; then
  say "nothing answers on $upstream_host:$upstream_port; starting a private RabbitMQ node in $node_dir"
  node_started=1
  NACKGUARD_TEST_BROKER_PORT=$upstream_port "$node_script" start "$node_dir"
  say "its CLI: $node_dir/rabbitmqctl (e.g. $node_dir/rabbitmqctl list_queues)"
else
  say "nothing answers on $upstream_host:$upstream_port (upstream in $config); start the broker first"
  exit 1
fi

"$build_dir/nackguard" --config "$config" "$@" &
proxy_pid=$!

# Wait until the proxy listens, then tell the user where to connect.
connect_host=$listen_address
[[ $connect_host == 0.0.0.0 || $connect_host == "::" ]] && connect_host=127.0.0.1
for _ in $(seq 1 50); do
  kill -0 "$proxy_pid" 2>/dev/null || break
  answers "$connect_host" "$listen_port" && break
  sleep 0.2
done
if kill -0 "$proxy_pid" 2>/dev/null; then
  echo
  echo "Point your consumer at amqp://guest:guest@$connect_host:$listen_port/"
  echo "(nackguard forwards to $upstream_host:$upstream_port; Ctrl-C to stop)"
  echo
fi

proxy_status=0
wait "$proxy_pid" || proxy_status=$?
proxy_pid=
if ((proxy_status != 0)); then
  say "nackguard exited with status $proxy_status"
fi
exit "$proxy_status"
