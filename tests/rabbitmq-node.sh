#!/usr/bin/env bash
# Start, stop and inspect a PRIVATE RabbitMQ node for nackguard's tests.
#
#   tests/rabbitmq-node.sh start|stop|status|env DIR
#
# Everything the node writes lives under DIR (e.g. build/rabbitmq) and every
# port it opens is on 127.0.0.1, so it never touches a system RabbitMQ node or
# a system epmd:
#
#   NACKGUARD_TEST_RABBITMQ_VERSION  3.10 (Debian 12's 3.10.8, the default), 4.0 (4.0.5)
#                               or 4.3 (4.3.6); a 4.x node runs in NACKGUARD_TEST_ROOTFS
#   NACKGUARD_TEST_ROOTFS       4.x: the root file system of the version's Debian suite
#                               (default: DIR's parent/rootfs-trixie for 4.0, rootfs-sid for
#                               4.3), built or completed by tests/rabbitmq-rootfs.sh at `start`
#   NACKGUARD_TEST_NODE, NACKGUARD_TEST_BROKER_PORT, NACKGUARD_TEST_DIST_PORT,
#   NACKGUARD_TEST_EPMD_PORT    node name, AMQP listener, Erlang distribution (the CLI tools
#                               use the 10 ports above it) and the node's own epmd; defaults
#                               per version in tests/rabbitmq-versions.sh (3.10:
#                               nackguard-test@localhost, 21672, 21673, 21369)
#   NACKGUARD_TEST_RABBITMQ_CONF_EXTRA  optional lines appended to rabbitmq.conf
#   NACKGUARD_TEST_RABBITMQ_PLUGINS     plugins to enable, comma-separated (e.g.
#                               rabbitmq_prometheus; give its listener a loopback address and
#                               a port of its own in NACKGUARD_TEST_RABBITMQ_CONF_EXTRA);
#                               unset: none
#   NACKGUARD_TEST_RABBITMQ_ADVANCED_CONFIG  optional Erlang term list written to
#                               DIR/advanced.config, for settings rabbitmq.conf has no key
#                               for, e.g. '[{rabbit, [{channel_tick_interval, 500}]}].';
#                               unset: no advanced.config (one left by an earlier start goes)
#   NACKGUARD_TEST_RABBITMQ_FRESH=1     `start` wipes the node's data (queues,
#                               users, ...) first, unless the node is running
#   NACKGUARD_TEST_START_TIMEOUT        seconds `start` waits for the node (3.10: 60,
#                               4.0: 120, 4.3: 300: its first boot can take over 90 s)
#
# The node runs as the `rabbitmq` user (runuser, clean environment) so that it
# and the CLI tools share /var/lib/rabbitmq/.erlang.cookie. A 4.x node and its CLI
# tools run as the root file system's own rabbitmq user, inside it:
# `chroot ROOTFS runuser -u rabbitmq -- env -i ...`, with ROOTFS/proc mounted and DIR
# bind-mounted at the same path inside ROOTFS (so DIR's paths mean the same inside and
# out, and the node's data stays in DIR); `stop` unmounts DIR, and ROOTFS/proc once no
# process runs inside ROOTFS any more (tests/rabbitmq-rootfs.sh release).
#
# Layout of DIR (DIR itself stays owned by whoever runs this script):
#   rabbitmq.conf, enabled_plugins   generated configuration (and advanced.config, see
#                                    NACKGUARD_TEST_RABBITMQ_ADVANCED_CONFIG)
#   rabbitmqctl                      generated wrapper: rabbitmqctl -n NODE ...
#   rabbitmq-diagnostics, rabbitmq-queues, rabbitmq-plugins   symlinks to the same wrapper
#   mnesia/                          node data (owned by rabbitmq)
#   log/                             node logs (owned by rabbitmq); log/console.log
#                                    is the node's stdout/stderr
#   launcher.pid, beam.pid           pids recorded by `start`, used by `stop`
#   node-settings                    version, root file system, node name and ports
#                                    saved by `start`; later calls on DIR use them
#                                    when the variables above are not set
#
# `start` reuses a node that already answers; `stop` asks the node to stop and
# only as a last resort signals the pids recorded by `start`, then kills the
# private epmd if no other node is registered with it.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/rabbitmq-command.sh
. "$here/rabbitmq-command.sh"
rabbitmq_dir_command "$@"
# The settings, paths and environment; what the script writes in DIR; a 4.x node's root.
# shellcheck source=tests/rabbitmq-node-env.sh
. "$here/rabbitmq-node-env.sh"
# shellcheck source=tests/rabbitmq-node-files.sh
. "$here/rabbitmq-node-files.sh"
# shellcheck source=tests/rabbitmq-node-chroot.sh
. "$here/rabbitmq-node-chroot.sh"

is_running() {
  timeout 30 "$ctl" -q -t 15 status >/dev/null 2>&1
}

pid_alive() {
  [[ -n ${1:-} ]] && kill -0 "$1" 2>/dev/null
}

# Pid of this node's Erlang VM: the one recorded at start, else a beam.smp of
# the rabbitmq user whose environment names this node (node names are unique).
find_beam() {
  local p
  for p in $(read_pid "$beam_pid_file") $(read_pid "$node_pid_file") \
    $(pgrep -u "$(rabbitmq_owner 2>/dev/null | cut -d: -f1)" -x beam.smp 2>/dev/null || true); do
    if is_node_beam "$p"; then
      echo "$p"
      return 0
    fi
  done
}

# True if pid $1 is the launcher `start` ran for this node (runuser ... env -i
# RABBITMQ_NODENAME=NODE ...).
is_launcher() {
  pid_alive "${1:-}" &&
    tr '\0' '\n' <"/proc/$1/cmdline" 2>/dev/null | grep -qxF "RABBITMQ_NODENAME=$node"
}

# True if pid $1 is this node's Erlang VM (its environment names the node; a
# recycled pid would not).
is_node_beam() {
  pid_alive "${1:-}" &&
    tr '\0' '\n' <"/proc/$1/environ" 2>/dev/null | grep -qxF "RABBITMQ_NODENAME=$node"
}

read_pid() {
  if [[ -s $1 ]]; then tr -dc '0-9' <"$1"; fi
}

# Shows the end of what the node logged since `start` began (node_log_offset).
node_log_offset=0
show_log_tail() {
  if [[ -s $node_log ]] && (($(stat -c %s "$node_log") > node_log_offset)); then
    say "---- last lines of $node_log ----"
    tail -c +"$((node_log_offset + 1))" "$node_log" | tail -n 30 >&2
  fi
  if [[ -s $console_log ]]; then
    # The node's stdout/stderr: the cause is usually near its top ("BOOT FAILED").
    say "---- $console_log ----"
    if (($(wc -l <"$console_log") <= 80)); then
      cat "$console_log" >&2
    else
      head -n 30 "$console_log" >&2
      echo "[...]" >&2
      tail -n 30 "$console_log" >&2
    fi
  fi
  say "----"
}

# After a failed start: stop what this start launched, and its epmd.
abort_start() {
  local launcher=$1 beam i
  beam=$(find_beam)
  if pid_alive "$launcher"; then
    kill -TERM "$launcher" 2>/dev/null || true
    for ((i = 0; i < 10; i++)); do
      pid_alive "$launcher" || break
      sleep 1
    done
  fi
  if is_node_beam "$beam"; then
    kill -KILL "$beam" 2>/dev/null || true
  fi
  clean_up_after "$launcher"
  show_log_tail
  die "$2 (logs: $console_log, $node_log)"
}

# Kills the node's private epmd if no other node is registered with it.
stop_epmd() {
  local names i
  for ((i = 0; i < 10; i++)); do
    names=$(ERL_EPMD_ADDRESS=127.0.0.1 "${in_root[@]}" epmd -port "$epmd_port" -names 2>/dev/null) ||
      return 0
    grep -q '^name ' <<<"$names" || break
    sleep 0.5 # a node that just died may still be listed for a moment
  done
  if grep -q '^name ' <<<"$names"; then
    say "epmd on port $epmd_port still has nodes registered; leaving it running"
  else
    ERL_EPMD_ADDRESS=127.0.0.1 "${in_root[@]}" epmd -port "$epmd_port" -kill >/dev/null 2>&1 ||
      true
  fi
}

# The end of a stop or of a failed start, once the node's VM is gone: the launcher $1 killed
# if it is still alive, the recorded pids forgotten, the private epmd stopped, and a 4.x
# node's DIR released from its root file system.
clean_up_after() {
  local launcher=$1
  if pid_alive "$launcher"; then
    kill -KILL "$launcher" 2>/dev/null || true
  fi
  rm -f "$launcher_pid_file" "$beam_pid_file"
  stop_epmd
  if [[ -n $rootfs ]]; then
    leave_rootfs
  fi
}

do_start() {
  if is_running; then
    say "node $node already running (AMQP 127.0.0.1:$amqp_port); reusing it"
    return 0
  fi
  # Refuse to start when the AMQP port is taken by something else: the node
  # would fail later with a less obvious message.
  if (exec 3<>"/dev/tcp/127.0.0.1/$amqp_port") 2>/dev/null; then
    die "127.0.0.1:$amqp_port is already in use by something that is not node $node;" \
      "set NACKGUARD_TEST_BROKER_PORT to another port"
  fi
  # A launcher from an earlier start that never came up: stop it first.
  local old
  old=$(read_pid "$launcher_pid_file")
  if is_launcher "$old"; then
    say "an earlier launcher (pid $old) is still alive but the node does not answer; stopping it"
    do_stop || true
  fi

  if [[ -n $rootfs ]]; then
    enter_rootfs
  fi
  if [[ ${NACKGUARD_TEST_RABBITMQ_FRESH:-0} == 1 ]]; then
    rm -rf "${mnesia_dir:?}"
    prepare
  fi
  write_config
  say "starting node $node (AMQP 127.0.0.1:$amqp_port, dist $dist_port, epmd $epmd_port) in $dir"
  : >"$console_log"
  if [[ -s $node_log ]]; then node_log_offset=$(stat -c %s "$node_log"); fi
  rm -f "$beam_pid_file" "$node_pid_file"
  # setsid: the node gets its own session, so a Ctrl-C in the caller's
  # terminal does not reach it; it is stopped with `stop`.
  # runuser and sudo apply the PAM limits, a soft limit of 1024 open files here: then the VM
  # caps itself at 832 sockets, and its queue files share them. Raise the soft limit to the
  # hard one (at most 65536) inside the new session.
  # shellcheck disable=SC2016  # expanded by the /bin/sh that runs it, not here
  local raise_nofile='n=$(ulimit -Hn); { [ "$n" = unlimited ] || [ "$n" -gt 65536 ]; } && n=65536
ulimit -n "$n" 2>/dev/null; exec "$@"'
  # Every descriptor above 2 is closed first: the node outlives its caller, and one it
  # inherited (a `flock LOCK tests/run.sh`'s lock, a pipe) would be held as long as it runs.
  (
    cd "$dir"
    for fd in /proc/self/fd/*; do
      fd=${fd##*/}
      if ((fd > 2)); then eval "exec $fd>&-"; fi
    done
    exec setsid "${as_user[@]}" env -i "${node_env[@]}" \
      /bin/sh -c "$raise_nofile" rabbitmq-server "$rabbitmq_bin/rabbitmq-server"
  ) >>"$console_log" 2>&1 </dev/null &
  local launcher=$!
  echo "$launcher" >"$launcher_pid_file"

  local t0=$SECONDS deadline=$((SECONDS + start_timeout)) remaining
  while :; do
    if ! pid_alive "$launcher"; then
      abort_start "$launcher" "node $node exited during startup"
    fi
    remaining=$((deadline - SECONDS))
    if ((remaining <= 0)); then
      abort_start "$launcher" "node $node did not start within ${start_timeout}s"
    fi
    # await_startup fails at once while the node is not yet registered with
    # epmd; retry until the deadline.
    if as_rabbitmq "$rabbitmq_bin/rabbitmqctl" -q -n "$node" await_startup \
      --timeout "$remaining" >/dev/null 2>&1; then
      break
    fi
    sleep 1
  done
  local beam
  beam=$(read_pid "$node_pid_file")
  [[ -n $beam ]] && echo "$beam" >"$beam_pid_file"
  say "node $node is up after $((SECONDS - t0))s"
}

do_stop() {
  local launcher beam
  launcher=$(read_pid "$launcher_pid_file")
  is_launcher "$launcher" || launcher=''
  beam=$(find_beam)

  local p i wait_s=30
  if is_running; then
    say "stopping node $node"
    if [[ -n $beam ]]; then
      # With the pid file, `stop` waits until the OS process has exited.
      "$ctl" -q stop "$node_pid_file" >/dev/null 2>&1 || "$ctl" -q stop >/dev/null 2>&1 || true
    else
      "$ctl" -q stop >/dev/null 2>&1 || true
    fi
  else
    say "node $node does not answer"
    wait_s=0
  fi

  # Wait for the processes recorded by `start`; signal them only as a last resort.
  for p in "$beam" "$launcher"; do
    for ((i = 0; i < wait_s; i++)); do
      pid_alive "$p" || break
      sleep 1
    done
  done
  if pid_alive "$launcher"; then
    # runuser passes TERM on to rabbitmq-server, which stops the node.
    say "launcher pid $launcher still alive; sending TERM"
    kill -TERM "$launcher" 2>/dev/null || true
    for ((i = 0; i < 15; i++)); do
      pid_alive "$launcher" || pid_alive "$beam" || break
      sleep 1
    done
  fi
  if pid_alive "$beam"; then
    say "node pid $beam still alive; sending KILL"
    kill -KILL "$beam" 2>/dev/null || true
  fi
  clean_up_after "$launcher"
}

do_status() {
  if is_running; then
    echo "node $node running: AMQP 127.0.0.1:$amqp_port, dist $dist_port, epmd $epmd_port, dir $dir"
    return 0
  fi
  echo "node $node not running"
  return 3
}

do_env() {
  printf 'export NACKGUARD_TEST_BROKER_HOST=%q\n' 127.0.0.1
  printf 'export NACKGUARD_TEST_BROKER_PORT=%q\n' "$amqp_port"
  printf 'export NACKGUARD_TEST_BROKER_URL=%q\n' "amqp://guest:guest@127.0.0.1:$amqp_port/"
  printf 'export NACKGUARD_TEST_NODE=%q\n' "$node"
  printf 'export NACKGUARD_TEST_RABBITMQCTL=%q\n' "$ctl"
  printf 'export NACKGUARD_TEST_RABBITMQ_DIR=%q\n' "$dir"
  printf 'export NACKGUARD_TEST_RABBITMQ_LOG=%q\n' "$node_log"
}

prepare
run_action
