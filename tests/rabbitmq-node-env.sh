# shellcheck shell=bash disable=SC2034,SC2154  # shares its variables with tests/rabbitmq-node.sh
# tests/rabbitmq-node.sh's settings, paths and environment (sourced by it once `here`, the
# script's directory, and `dir`, DIR, are set): the version, the node's name and ports, its
# root file system (4.x), the files in DIR, the clean environment the node and its CLI tools
# run in, and the user they run as. Exits 2 for an unknown version or a bad port.

# Settings: the environment, else what `start` saved in DIR/node-settings (so
# that stop/status/env find the node DIR holds), else the defaults.
settings_file="$dir/node-settings"
read_saved_settings "$settings_file" version rootfs node amqp_port dist_port epmd_port
# shellcheck source=tests/rabbitmq-versions.sh
. "$here/rabbitmq-versions.sh"
version=${NACKGUARD_TEST_RABBITMQ_VERSION:-${saved_version:-3.10}}
if ! rabbitmq_version_settings "$version"; then
  echo "rabbitmq-node: NACKGUARD_TEST_RABBITMQ_VERSION='$version':" \
    "use one of ${rabbitmq_versions[*]}" >&2
  exit 2
fi
# A DIR saved with another version does not lend its name and ports to this one.
if [[ -n $saved_version && $saved_version != "$version" ]]; then
  saved_node='' saved_amqp_port='' saved_dist_port='' saved_epmd_port='' saved_rootfs=''
fi
node=${NACKGUARD_TEST_NODE:-${saved_node:-$rmq_node}}
amqp_port=${NACKGUARD_TEST_BROKER_PORT:-${saved_amqp_port:-$rmq_amqp_port}}
dist_port=${NACKGUARD_TEST_DIST_PORT:-${saved_dist_port:-$rmq_dist_port}}
epmd_port=${NACKGUARD_TEST_EPMD_PORT:-${saved_epmd_port:-$rmq_epmd_port}}
rootfs='' suite=$rmq_suite
in_root=() # the prefix that runs a command inside the node's root file system
if [[ -n $suite ]]; then
  rootfs=$(realpath -m "${NACKGUARD_TEST_ROOTFS:-${saved_rootfs:-$(dirname "$dir")/rootfs-$suite}}")
  in_root=(chroot "$rootfs")
fi
rootfs_script="$here/rabbitmq-rootfs.sh"
ctl_port_min=$((dist_port + 1))
ctl_port_max=$((dist_port + 10))
start_timeout=${NACKGUARD_TEST_START_TIMEOUT:-$rmq_start_timeout}
rabbitmq_bin=/usr/lib/rabbitmq/bin
rabbitmq_home=/var/lib/rabbitmq # the rabbitmq user's home: holds .erlang.cookie

# A port in the kernel's ephemeral range (net.ipv4.ip_local_port_range, 32768-60999 by
# default) can be the local end of any program's outgoing connection, and the node then fails
# to listen with eaddrinuse: the defaults are all below it.
read -r ephemeral_min ephemeral_max </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null ||
  ephemeral_min=32768 ephemeral_max=60999
for p in "$amqp_port" "$dist_port" "$epmd_port"; do
  [[ $p =~ ^[0-9]+$ ]] || { echo "rabbitmq-node: bad port '$p'" >&2; exit 2; }
  if ((p >= ephemeral_min && p <= ephemeral_max)); then
    echo "rabbitmq-node: warning: port $p is in the ephemeral range $ephemeral_min-$ephemeral_max;" \
      "an outgoing connection may hold it: pick a port below $ephemeral_min" >&2
  fi
done

ctl="$dir/rabbitmqctl"
log_dir="$dir/log"
mnesia_dir="$dir/mnesia"
console_log="$log_dir/console.log"
node_log="$log_dir/$node.log"
launcher_pid_file="$dir/launcher.pid"
beam_pid_file="$dir/beam.pid"
node_pid_file="$mnesia_dir/node.pid" # written by the node itself

say() { echo "rabbitmq-node: $*" >&2; }
die() { say "$*"; exit 1; }

# The clean environment shared by the node and its CLI tools, one VAR=value
# per element (passed to `env -i`).
node_env=(
  "HOME=$rabbitmq_home"
  "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
  "LANG=C.UTF-8"
  "LC_ALL=C.UTF-8"
  "RABBITMQ_NODENAME=$node"
  "RABBITMQ_USE_LONGNAME=false"
  "RABBITMQ_NODE_IP_ADDRESS=127.0.0.1"
  "RABBITMQ_NODE_PORT=$amqp_port"
  "RABBITMQ_DIST_PORT=$dist_port"
  "RABBITMQ_CTL_DIST_PORT_MIN=$ctl_port_min"
  "RABBITMQ_CTL_DIST_PORT_MAX=$ctl_port_max"
  "RABBITMQ_MNESIA_BASE=$mnesia_dir"
  "RABBITMQ_PID_FILE=$node_pid_file"
  "RABBITMQ_LOG_BASE=$log_dir"
  "RABBITMQ_CONFIG_FILE=$dir/rabbitmq.conf"
  "RABBITMQ_ADVANCED_CONFIG_FILE=$dir/advanced.config"
  "RABBITMQ_ENABLED_PLUGINS_FILE=$dir/enabled_plugins"
  "RABBITMQ_CONF_ENV_FILE=/dev/null"
  "ERL_EPMD_ADDRESS=127.0.0.1"
  "ERL_EPMD_PORT=$epmd_port"
  "ERL_CRASH_DUMP=$log_dir/erl_crash.dump"
  "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}"
  "RABBITMQ_CTL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}"
)

# Sets `as_user`: the prefix that runs a command as the rabbitmq user (the root file
# system's own for 4.x, inside it). Also written into the CLI wrapper (declare -f).
set_as_user() {
  if [[ $(id -u) -eq 0 ]]; then
    as_user=("${in_root[@]}" runuser -u rabbitmq --)
  elif ((${#in_root[@]} == 0)) && [[ $(id -un) == rabbitmq ]]; then
    as_user=()
  elif ((${#in_root[@]} == 0)); then
    as_user=(sudo -n -u rabbitmq --)
  else
    as_user=(sudo -n "${in_root[@]}" runuser -u rabbitmq --)
  fi
}
set_as_user

# Runs a command as the rabbitmq user in the node's clean environment.
as_rabbitmq() {
  "${as_user[@]}" env -i "${node_env[@]}" "$@"
}

# The rabbitmq user's uid:gid as the node's (root file system's) passwd names it.
rabbitmq_owner() {
  if [[ -z $rootfs ]]; then
    echo rabbitmq:rabbitmq
  else
    awk -F: '$1 == "rabbitmq" {print $3 ":" $4; found=1} END{exit !found}' "$rootfs/etc/passwd"
  fi
}
