# shellcheck shell=bash disable=SC2034  # its variables are for the scripts that source it
# The RabbitMQ versions the tests run against, and where each one's private nodes live.
# Sourced (not run) by tests/rabbitmq-node.sh (in tests/rabbitmq-node-env.sh),
# tests/rabbitmq-cluster.sh and tests/run.sh, so that a version's names, ports and root file
# system are written down once.
#
#   version  package                          runs in                   test-name part
#   3.10     Debian 12's rabbitmq-server      the host                  (none)
#   4.0      Debian 13 (trixie)'s, 4.0.5      DIR/../rootfs-trixie      .rmq40
#   4.3      Debian unstable (sid)'s, 4.3.6   DIR/../rootfs-sid         .rmq43
#
# Debian 12 has no 4.x package, and the newer packages' binaries need their own libc: a 4.x
# node runs chrooted in a root file system of its Debian suite (tests/rabbitmq-rootfs.sh).
# Every port is below Linux's ephemeral range (32768-60999), where any program's outgoing
# connection could hold it. The CLI tools of a node use the 10 ports above its distribution
# port. Ports taken elsewhere in the tests (keep clear of them): 24671-24683 and 24469 (the TLS
# node, tests/integration/tls_support.py), 25xxx (the metrics nodes), 26xxx and 27xxx (the
# fault nodes), 28xxx (test_node_script), 29xxx and 31680-31685 (tests/bench/compare.sh),
# 31269-31490 (the management nodes of test_management_limits and test_counting),
# 30xxx (the consumer-timeout nodes).
#
# The main test node of each version (tests/run.sh starts them; tests/rabbitmq-node.sh uses
# these when NACKGUARD_TEST_NODE and the port variables are not set):
#
#   version  node                          AMQP   distribution  epmd   first boot within
#   3.10     nackguard-test@localhost      21672  21673         21369  60 s
#   4.0      nackguard-test40@localhost    22672  22673         22369  120 s
#   4.3      nackguard-test43@localhost    24772  24773         24369  300 s (seen > 90 s)
#
# (4.3's AMQP and distribution ports are not 24672/24673: the TLS node has those.)
#
# The three-node clusters (tests/rabbitmq-cluster.sh; one private epmd per cluster, each
# node's distribution port is its AMQP port + 1):
#
#   3.10     nackguard-c{1,2,3}@localhost      23672 23772 23872   epmd 23369
#   4.3      nackguard-c{1,2,3}-43@localhost   20672 20772 20872   epmd 20369
#
# (4.3's are not 26672/...: the 3.10 fault node has 26672, 26673 and epmd 26369.)

# The versions, in the order tests/run.sh starts and lists them.
rabbitmq_versions=(3.10 4.0 4.3)

# rabbitmq_version_settings VERSION: sets, for the main test node of VERSION,
#   rmq_node rmq_amqp_port rmq_dist_port rmq_epmd_port   its defaults
#   rmq_suite          the Debian suite of its root file system ('' for 3.10: the host)
#   rmq_start_timeout  seconds `start` waits for the node by default
#   rmq_tag            the part of a test's name that selects it (rmq40), '' for 3.10
#   rmq_env_prefix     the prefix of tests/run.sh's variables for it (NACKGUARD_TEST40_)
# Returns 1 for an unknown version.
rabbitmq_version_settings() {
  case "$1" in
    3.10)
      rmq_node=nackguard-test@localhost rmq_amqp_port=21672 rmq_dist_port=21673
      rmq_epmd_port=21369 rmq_suite='' rmq_start_timeout=60 rmq_tag=''
      rmq_env_prefix=NACKGUARD_TEST_
      ;;
    4.0)
      rmq_node=nackguard-test40@localhost rmq_amqp_port=22672 rmq_dist_port=22673
      rmq_epmd_port=22369 rmq_suite=trixie rmq_start_timeout=120 rmq_tag=rmq40
      rmq_env_prefix=NACKGUARD_TEST40_
      ;;
    4.3)
      # The first boot of a fresh 4.3 node took longer than 90 s here (Erlang/OTP 29 in a
      # chroot, on 2 shared cores); later boots take 10-20 s.
      rmq_node=nackguard-test43@localhost rmq_amqp_port=24772 rmq_dist_port=24773
      rmq_epmd_port=24369 rmq_suite=sid rmq_start_timeout=300 rmq_tag=rmq43
      rmq_env_prefix=NACKGUARD_TEST43_
      ;;
    *) return 1 ;;
  esac
}

# rabbitmq_cluster_settings VERSION: sets the three-node cluster's layout for VERSION:
#   rmq_cluster_names rmq_cluster_amqp_ports rmq_cluster_dist_ports  arrays, node by node
#   rmq_cluster_epmd_port                                            the cluster's epmd
# Returns 1 for a version without a cluster layout (4.0).
rabbitmq_cluster_settings() {
  case "$1" in
    3.10)
      rmq_cluster_names=(nackguard-c1@localhost nackguard-c2@localhost nackguard-c3@localhost)
      rmq_cluster_amqp_ports=(23672 23772 23872)
      rmq_cluster_epmd_port=23369
      ;;
    4.3)
      rmq_cluster_names=(nackguard-c1-43@localhost nackguard-c2-43@localhost
        nackguard-c3-43@localhost)
      rmq_cluster_amqp_ports=(20672 20772 20872)
      rmq_cluster_epmd_port=20369
      ;;
    *) return 1 ;;
  esac
  rmq_cluster_dist_ports=()
  local p
  for p in "${rmq_cluster_amqp_ports[@]}"; do rmq_cluster_dist_ports+=($((p + 1))); done
}
