# shellcheck shell=bash disable=SC2034,SC2154  # shares its variables with tests/run.sh
# tests/run.sh's choice of RabbitMQ versions, and how it reaches each version's main test node.
# Sourced by tests/run.sh after it set root, build_dir, node_dir (the 3.10 node's directory)
# and node_script; the version table is tests/rabbitmq-versions.sh's. Sets:
#   brokers         the versions NACKGUARD_TEST_BROKERS asks for, comma-separated, in the
#                   table's order (3.10,4.0,4.3 by default); wants_broker VERSION tests one
#   tags_wanted, tags_unwanted  the test-name tags (rmq40|rmq43) of the 4.x versions wanted
#                   and not wanted
#   broker_filter   the ctest arguments that select the tests of the versions wanted
#   node_dir_of VERSION, run_node VERSION ARGS...  a node's directory, and
#                   tests/rabbitmq-node.sh ARGS run with its settings
#   cmake_node_args the -D options that name the 4.x nodes in the tests' CMake cache

# shellcheck source=tests/rabbitmq-versions.sh
. "$root/tests/rabbitmq-versions.sh"

brokers=${NACKGUARD_TEST_BROKERS:-all}
case "$brokers" in all) brokers="3.10,4.0,4.3" ;; both) brokers="3.10,4.0" ;; esac
wanted=",${brokers// /,},"
brokers=''
for v in "${rabbitmq_versions[@]}"; do # in the table's order, each once
  if [[ $wanted == *,$v,* ]]; then brokers+="${brokers:+,}$v"; fi
  while [[ $wanted == *,$v,* ]]; do wanted=${wanted/,$v,/,}; done
done
if [[ -z $brokers || -n ${wanted//,/} ]]; then
  echo "tests/run.sh: NACKGUARD_TEST_BROKERS='${NACKGUARD_TEST_BROKERS:-}': use 3.10, 4.0, 4.3," \
    "a comma-separated list of them, all or both" >&2
  exit 2
fi
wants_broker() { [[ ,$brokers, == *,$1,* ]]; }
# A test against a 4.x node has its version's tag (.rmq40, .rmq43) as a part of its name
# (tests/CMakeLists.txt); a test without one runs against the 3.10 node. With 3.10 the filter
# excludes the tags of the versions not wanted; without 3.10 it is a -R of the tags wanted,
# which a -R among the ctest arguments replaces.
tags_wanted='' tags_unwanted=''
for v in "${rabbitmq_versions[@]}"; do
  rabbitmq_version_settings "$v"
  [[ -n $rmq_tag ]] || continue
  if wants_broker "$v"; then
    tags_wanted+="${tags_wanted:+|}$rmq_tag"
  else
    tags_unwanted+="${tags_unwanted:+|}$rmq_tag"
  fi
done
broker_filter=()
if ! wants_broker 3.10; then
  broker_filter=(-R "[.]($tags_wanted)([.]|\$)")
elif [[ -n $tags_unwanted ]]; then
  broker_filter=(-E "[.]($tags_unwanted)([.]|\$)")
fi

# The node of a version: its directory, and tests/rabbitmq-node.sh run with its settings. The
# 3.10 node takes NACKGUARD_TEST_*; a 4.x one its NACKGUARD_TEST40_* or NACKGUARD_TEST43_*
# (else tests/rabbitmq-versions.sh's defaults), whatever NACKGUARD_TEST_* say.
node_dir_of() {
  if [[ $1 == 3.10 ]]; then echo "$node_dir"; else echo "$build_dir/rabbitmq-$1"; fi
}
run_node() { # version args...
  local version=$1
  shift
  if [[ $version == 3.10 ]]; then
    NACKGUARD_TEST_RABBITMQ_VERSION=3.10 "$node_script" "$@"
    return
  fi
  rabbitmq_version_settings "$version"
  local p=$rmq_env_prefix rootfs_var=${rmq_env_prefix}ROOTFS
  [[ $version != 4.0 ]] || rootfs_var=NACKGUARD_TEST_ROOTFS
  local name_var=${p}NODE port_var=${p}BROKER_PORT dist_var=${p}DIST_PORT epmd_var=${p}EPMD_PORT
  NACKGUARD_TEST_RABBITMQ_VERSION=$version \
    NACKGUARD_TEST_ROOTFS=${!rootfs_var:-$build_dir/rootfs-$rmq_suite} \
    NACKGUARD_TEST_NODE=${!name_var:-$rmq_node} \
    NACKGUARD_TEST_BROKER_PORT=${!port_var:-$rmq_amqp_port} \
    NACKGUARD_TEST_DIST_PORT=${!dist_var:-$rmq_dist_port} \
    NACKGUARD_TEST_EPMD_PORT=${!epmd_var:-$rmq_epmd_port} \
    NACKGUARD_TEST_START_TIMEOUT=${NACKGUARD_TEST_START_TIMEOUT:-$rmq_start_timeout} \
    "$node_script" "$@"
}
# The 4.x nodes' names, ports and directories for the tests' CMake cache (tests/CMakeLists.txt:
# NACKGUARD_TEST40_*, NACKGUARD_TEST43_*).
cmake_node_args=()
for v in 4.0 4.3; do
  rabbitmq_version_settings "$v"
  name_var=${rmq_env_prefix}NODE port_var=${rmq_env_prefix}BROKER_PORT
  cmake_node_args+=("-D${rmq_env_prefix}BROKER_PORT=${!port_var:-$rmq_amqp_port}"
    "-D${rmq_env_prefix}NODE=${!name_var:-$rmq_node}"
    "-D${rmq_env_prefix}NODE_DIR=$(node_dir_of "$v")")
done
