#!/usr/bin/env bash
# Start, stop and inspect a PRIVATE three-node RabbitMQ cluster (3.10 by default, or 4.3) for
# nackguard's cluster tests (tests/integration/test_cluster.py).
#
#   tests/rabbitmq-cluster.sh start|stop|status|env DIR
#   NACKGUARD_TEST_CLUSTER_VERSION=4.3 tests/rabbitmq-cluster.sh start DIR
#
# Each node is a tests/rabbitmq-node.sh node (own data directory, every port on 127.0.0.1,
# run as the `rabbitmq` user), with the layout agreed for the cluster (the table is
# tests/rabbitmq-versions.sh's):
#
#   3.10 node                 4.3 node                     DIR      AMQP (3.10, 4.3)
#   nackguard-c1@localhost    nackguard-c1-43@localhost    DIR/n1   23672, 20672
#   nackguard-c2@localhost    nackguard-c2-43@localhost    DIR/n2   23772, 20772
#   nackguard-c3@localhost    nackguard-c3-43@localhost    DIR/n3   23872, 20872
#   each node's distribution port is its AMQP port + 1; one private epmd for the three on
#   23369 (3.10) or 20369 (4.3)
#
# A 4.3 cluster's three nodes run chrooted in one Debian sid root file system
# (NACKGUARD_TEST_ROOTFS, default DIR's parent/rootfs-sid), which they share (one Erlang
# cookie, which clustering needs); each has its own data directory, DIR/nN, bind-mounted
# into the root as tests/rabbitmq-node.sh does for any 4.x node.
#
# `start` boots the three nodes at once, then joins c2 and then c3 to c1 with
# `rabbitmqctl join_cluster`. A cluster whose three nodes already run clustered is reused;
# anything else (a node down, nodes not clustered) is stopped and started afresh, with empty
# data directories. `stop` stops the three at once. `status` exits 0 only when the three run
# as one cluster. `env` prints the variables the tests read (NACKGUARD_TEST_CLUSTER_*).
#
#   NACKGUARD_TEST_CLUSTER_VERSION   3.10 (default) or 4.3
#   NACKGUARD_TEST_ROOTFS            4.3: the sid root file system (DIR's parent/rootfs-sid)
#                                    (`start` saves both in DIR/cluster-settings; the other
#                                    actions on DIR use the saved ones when they are unset)
#   NACKGUARD_TEST_START_TIMEOUT     seconds each node may take to boot (3.10: 60, 4.3: 300)
#   NACKGUARD_TEST_CLUSTER_FAIL_JOIN a node name: its first join fails half way, so that
#                                    test_cluster checks that the script recovers
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/rabbitmq-command.sh
. "$here/rabbitmq-command.sh"
rabbitmq_dir_command "$@"
node_script="$here/rabbitmq-node.sh"
# shellcheck source=tests/rabbitmq-versions.sh
. "$here/rabbitmq-versions.sh"

say() { echo "rabbitmq-cluster: $*" >&2; }
die() { say "$*"; exit 1; }

# The version and root file system `start` saved, for the later actions on DIR.
settings_file="$dir/cluster-settings"
read_saved_settings "$settings_file" version rootfs
version=${NACKGUARD_TEST_CLUSTER_VERSION:-${saved_version:-3.10}}
if [[ $version != "$saved_version" ]]; then saved_rootfs=''; fi
rabbitmq_cluster_settings "$version" ||
  die "NACKGUARD_TEST_CLUSTER_VERSION='$version': use 3.10 or 4.3"
rabbitmq_version_settings "$version"
names=("${rmq_cluster_names[@]}")
amqp_ports=("${rmq_cluster_amqp_ports[@]}")
dist_ports=("${rmq_cluster_dist_ports[@]}")
epmd_port=$rmq_cluster_epmd_port
# The nodes' root file system (4.x): shared by the three, not DIR/nN's parent (DIR).
rootfs=''
rootfs_env=(-u NACKGUARD_TEST_ROOTFS)
if [[ -n $rmq_suite ]]; then
  rootfs=${NACKGUARD_TEST_ROOTFS:-${saved_rootfs:-$(dirname "$dir")/rootfs-$rmq_suite}}
  rootfs=$(realpath -m "$rootfs")
  rootfs_env=(NACKGUARD_TEST_ROOTFS="$rootfs")
fi
start_timeout=${NACKGUARD_TEST_START_TIMEOUT:-$rmq_start_timeout}

# Runs tests/rabbitmq-node.sh for node $1 (0-based) with that node's settings, whatever the
# caller's environment says about the main test node.
node() {
  local i=$1
  shift
  env -u NACKGUARD_TEST_RABBITMQ_CONF_EXTRA -u NACKGUARD_TEST_RABBITMQ_FRESH "${rootfs_env[@]}" \
    NACKGUARD_TEST_NODE="${names[i]}" \
    NACKGUARD_TEST_BROKER_PORT="${amqp_ports[i]}" \
    NACKGUARD_TEST_DIST_PORT="${dist_ports[i]}" \
    NACKGUARD_TEST_EPMD_PORT="$epmd_port" \
    NACKGUARD_TEST_RABBITMQ_VERSION="$version" \
    NACKGUARD_TEST_START_TIMEOUT="$start_timeout" \
    "$@"
}

node_dir() { echo "$dir/n$(($1 + 1))"; }
ctl() {
  local i=$1
  shift
  "$(node_dir "$i")/rabbitmqctl" "$@"
}

# Runs `$@ <i>` for the three nodes at once; fails if any failed (after all finished).
each_node() {
  local pids=() i rc=0
  for i in 0 1 2; do
    "$@" "$i" &
    pids+=($!)
  done
  for i in 0 1 2; do
    wait "${pids[i]}" || rc=1
  done
  return $rc
}

start_node() { node "$1" "$node_script" start "$(node_dir "$1")"; }
start_node_fresh() { node "$1" env NACKGUARD_TEST_RABBITMQ_FRESH=1 "$node_script" start "$(node_dir "$1")"; }
stop_node() { node "$1" "$node_script" stop "$(node_dir "$1")"; }
node_running() { node "$1" "$node_script" status "$(node_dir "$1")" >/dev/null 2>&1; }

# The running nodes c1 sees in its cluster, one per line.
running_members() {
  timeout 30 "$(node_dir 0)/rabbitmqctl" -q -t 15 cluster_status --formatter json 2>/dev/null |
    /usr/bin/python3 -c 'import json, sys; print("\n".join(json.load(sys.stdin)["running_nodes"]))' 2>/dev/null
}

clustered() {
  [[ -x $(node_dir 0)/rabbitmqctl ]] || return 1
  local members
  members=$(running_members) || return 1
  local name
  for name in "${names[@]}"; do
    grep -qxF "$name" <<<"$members" || return 1
  done
}

join_node() {
  local i=$1
  # For tests/integration/test_node_script.py: the first join of this node fails half way
  # (after join_cluster, as in CI), once.
  if [[ ${NACKGUARD_TEST_CLUSTER_FAIL_JOIN:-} == "${names[i]}" && ! -e $dir/.join-failed ]]; then
    : >"$dir/.join-failed"
    ctl "$i" -q stop_app >/dev/null && ctl "$i" -q join_cluster "${names[0]}" >/dev/null
    return 1
  fi
  ctl "$i" -q stop_app >/dev/null &&
    ctl "$i" -q join_cluster "${names[0]}" >/dev/null &&
    ctl "$i" -q start_app >/dev/null &&
    ctl "$i" -q await_startup --timeout "$start_timeout" >/dev/null
}

# A node whose join failed half way (seen in CI: start_app after join_cluster failed with
# {badmatch,{error,{normal,{mnesia_app,start,...}}}}, and a second join_cluster on the same
# node found rabbit not running) is taken out of c1's member list, wiped and started afresh,
# then joins again.
rejoin_node() {
  local i=$1
  stop_node "$i" || true
  ctl 0 -q forget_cluster_node "${names[i]}" >/dev/null 2>&1 || true
  start_node_fresh "$i" && join_node "$i"
}

do_start() {
  # Every node directory gets its CLI wrapper before anything asks a node.
  local i
  for i in 0 1 2; do node "$i" "$node_script" env "$(node_dir "$i")" >/dev/null; done
  if clustered; then
    say "RabbitMQ $version cluster ${names[*]} already running (AMQP ${amqp_ports[*]}); reusing it"
    return 0
  fi
  if [[ -n $saved_version && $saved_version != "$version" ]]; then
    # Its nodes would share DIR/nN with this version's, whose fresh start wipes them.
    say "$dir held a RabbitMQ $saved_version cluster; stopping it first"
    NACKGUARD_TEST_CLUSTER_VERSION=$saved_version "${BASH_SOURCE[0]}" stop "$dir"
  fi
  printf '%s\n' "version=$version" "rootfs=$rootfs" >"$settings_file"
  local t0=$SECONDS
  for i in 0 1 2; do
    if node_running "$i"; then
      say "node ${names[i]} runs outside a full cluster; stopping it for a fresh start"
      stop_node "$i"
    fi
  done
  say "starting RabbitMQ $version nodes ${names[*]} in $dir"
  rm -f "$dir/.join-failed"
  each_node start_node_fresh || die "a node did not start (see the lines above)"
  # c2 then c3: two joins at once raced in mnesia (one of them failed to start its app). A
  # node that fails is wiped and joins again, once.
  for i in 1 2; do
    join_node "$i" && continue
    say "node ${names[i]} did not join at the first try; wiping it and trying again"
    rejoin_node "$i" || die "node ${names[i]} could not join ${names[0]} (logs: $dir/n*/log)"
  done
  clustered || die "the three nodes run but do not form one cluster (cluster_status of ${names[0]})"
  say "RabbitMQ $version cluster ${names[*]} is up after $((SECONDS - t0))s"
}

do_stop() {
  local i
  for i in 0 1 2; do node "$i" "$node_script" env "$(node_dir "$i")" >/dev/null; done
  each_node stop_node
}

do_status() {
  local i down=0
  for i in 0 1 2; do
    if node_running "$i"; then
      echo "node ${names[i]} running: AMQP 127.0.0.1:${amqp_ports[i]}, dir $(node_dir "$i")"
    else
      echo "node ${names[i]} not running"
      down=1
    fi
  done
  if ((down == 0)) && clustered; then
    echo "cluster: the three nodes run as one cluster"
    return 0
  fi
  echo "cluster: not complete"
  return 3
}

do_env() {
  local i ports='' nodes='' dirs=''
  for i in 0 1 2; do
    ports+="${ports:+,}${amqp_ports[i]}"
    nodes+="${nodes:+,}${names[i]}"
    dirs+="${dirs:+,}$(node_dir "$i")"
  done
  printf 'export NACKGUARD_TEST_CLUSTER_DIR=%q\n' "$dir"
  printf 'export NACKGUARD_TEST_CLUSTER_VERSION=%q\n' "$version"
  printf 'export NACKGUARD_TEST_CLUSTER_PORTS=%q\n' "$ports"
  printf 'export NACKGUARD_TEST_CLUSTER_NODES=%q\n' "$nodes"
  printf 'export NACKGUARD_TEST_CLUSTER_NODE_DIRS=%q\n' "$dirs"
  printf 'export NACKGUARD_TEST_CLUSTER_DIST_PORTS=%q\n' "${dist_ports[0]},${dist_ports[1]},${dist_ports[2]}"
  printf 'export NACKGUARD_TEST_CLUSTER_EPMD_PORT=%q\n' "$epmd_port"
}

run_action
