"""Helpers for the cluster tests (test_cluster.py): the private three-node RabbitMQ 3.10 (or
4.3) cluster of tests/rabbitmq-cluster.sh, its nodes one by one, and a nackguard in front of
all three.

What is here (on top of harness.py, redelivery_support.py and operations_support.py, which it
uses and does not change):
  NODES              the three nodes (name, AMQP port, directory), as the cluster script lays
                     them out
  start_cluster()    boots the cluster (reused when it already runs clustered)
  stop_cluster()     stops the three nodes
  stop_node(), kill_node(), start_nodes(), start_node_async(), ensure_all_running()
                     one node at a time, through tests/rabbitmq-node.sh with that node's
                     settings
  use_node()         points harness (BROKER_PORT, RABBITMQCTL) at a node that is up, so that
                     redelivery_support.Broker and the queue clean-ups talk to it
  queue_leader()     the node holding a quorum queue's leader (rabbitmqctl list_queues)
  proxy_config()     the config keys of a nackguard whose upstream.addresses lists the nodes
  serving_nodes()    the nodes a nackguard has upstream connections to now (its
                     upstream_connections gauge)
  QUORUM_ARGS        arguments of a quorum queue replicated on the three nodes
  ClusterTest        unittest base (an operations_support.OpsTest): every node up before
                     each test, quorum declares, nackguards listing the three nodes, the
                     serving node stopped, reconnecting consumers (reconnecting_consumer.py)

Environment:
  NACKGUARD_TEST_CLUSTER_VERSION  3.10 or 4.3 (default: 4.3 in a module's rmq43 variant, else
                               3.10): the cluster's RabbitMQ, with its own
                               names and ports (tests/rabbitmq-versions.sh; 4.3's nodes run in
                               NACKGUARD_TEST_ROOTFS, default: the cluster directory's
                               parent/rootfs-sid, e.g. $NACKGUARD_BUILD_DIR/rootfs-sid)
  NACKGUARD_TEST_CLUSTER_DIR   where the nodes live ($NACKGUARD_BUILD_DIR/cluster, or
                               cluster-4.3)
  NACKGUARD_TEST_CLUSTER_KEEP=1  leave the cluster running after the tests (a developer's
                               second run then starts in seconds)
"""

import fcntl
import json
import os
import signal
import socket
import subprocess
import time

import harness
import private_node
import operations_support as ops
import redelivery_support as rs
from waiting import wait_for  # (also re-exported: the tests say cs.wait_for)
from reconnecting_consumer import ReconnectingConsumer

TESTS_DIR = os.path.dirname(harness.HERE)
CLUSTER_SCRIPT = os.path.join(TESTS_DIR, "rabbitmq-cluster.sh")
NODE_SCRIPT = os.path.join(TESTS_DIR, "rabbitmq-node.sh")
# A module's rmq43 variant (NACKGUARD_TEST_RABBITMQ_VERSION=4.3) runs on the 4.3 cluster.
VERSION = (os.environ.get("NACKGUARD_TEST_CLUSTER_VERSION") or
           ("4.3" if private_node.VERSION == "4.3" else "3.10"))
# Each version's layout, as tests/rabbitmq-versions.sh has it: node names, AMQP ports (the
# distribution port is the next one), the cluster's epmd port.
_LAYOUTS = {
    "3.10": (("nackguard-c1@localhost", "nackguard-c2@localhost", "nackguard-c3@localhost"),
             (23672, 23772, 23872), 23369),
    "4.3": (("nackguard-c1-43@localhost", "nackguard-c2-43@localhost",
             "nackguard-c3-43@localhost"), (20672, 20772, 20872), 20369),
}
if VERSION not in _LAYOUTS:
    raise SystemExit(f"NACKGUARD_TEST_CLUSTER_VERSION={VERSION!r}: use 3.10 or 4.3")
_NAMES, _PORTS, EPMD_PORT = _LAYOUTS[VERSION]
CLUSTER_DIR = (os.environ.get("NACKGUARD_TEST_CLUSTER_DIR") or
               os.path.join(harness.BUILD_DIR, "cluster" if VERSION == "3.10" else
                            "cluster-" + VERSION))
# 4.3: the root file system the three nodes share. Unset: the cluster script's default
# (CLUSTER_DIR's parent/rootfs-sid) at its first start, then the one each node's directory
# saved (a node started alone must not get CLUSTER_DIR/rootfs-sid, tests/rabbitmq-node.sh's
# default for DIR/nN).
ROOTFS = os.environ.get("NACKGUARD_TEST_ROOTFS") or None
KEEP = os.environ.get("NACKGUARD_TEST_CLUSTER_KEEP", "") not in ("", "0")
START_TIMEOUT = 300
NODE_TIMEOUT = 120

QUORUM_ARGS = {"x-queue-type": "quorum", "x-quorum-initial-group-size": 3}


class Node:
    def __init__(self, index, name, port, dist_port):
        self.index = index
        self.name = name
        self.port = port
        self.dist_port = dist_port
        self.dir = os.path.join(CLUSTER_DIR, f"n{index + 1}")
        self.address = f"127.0.0.1:{port}"
        self.ctl_path = os.path.join(self.dir, "rabbitmqctl")

    def __repr__(self):
        return f"{self.name} ({self.address})"

    def accepts(self):
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return True
        except OSError:
            return False


NODES = [Node(i, _NAMES[i], _PORTS[i], _PORTS[i] + 1) for i in range(3)]


def node_named(name):
    for node in NODES:
        if node.name == name:
            return node
    raise AssertionError(f"{name!r} is not one of the cluster's nodes {NODES}")


def node_at(address):
    for node in NODES:
        if node.address == address:
            return node
    raise AssertionError(f"{address!r} is not one of the cluster's addresses")


def _run(args, env=None, timeout=NODE_TIMEOUT, want_stderr=False):
    result = subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed ({result.returncode}):\n"
                             f"{result.stderr}{result.stdout}")
    return result.stderr if want_stderr else result.stdout


def _node_env(node):
    """tests/rabbitmq-node.sh's variables for `node`, whatever the run set for the main test
    node (its environment wins over the settings saved in the node's directory)."""
    base = {k: v for k, v in os.environ.items()
            if k not in ("NACKGUARD_TEST_RABBITMQ_CONF_EXTRA", "NACKGUARD_TEST_RABBITMQ_FRESH",
                         "NACKGUARD_TEST_ROOTFS")}
    if VERSION != "3.10" and ROOTFS:
        base["NACKGUARD_TEST_ROOTFS"] = ROOTFS
    return private_node.node_env(node.name, node.port, node.dist_port, EPMD_PORT,
                                 version=VERSION, base=base)


# The nodes' ports and names are fixed, so two runs at once (the main suite and the
# sanitizer build's integration tests, which tests/run.sh runs side by side) would share and
# stop each other's nodes: each run holds this lock from start_cluster() to stop_cluster().
LOCK_PATH = f"/tmp/nackguard-test-cluster-{NODES[0].port}.lock"
_lock_file = None


def start_cluster(fail_join=None):
    """Takes the cluster lock (waiting for another run to finish with the cluster), then
    boots the cluster; returns the seconds that took and what the cluster script printed.
    With `fail_join` (a node), that node's first join fails half way, as one did in CI, and
    the script must recover (tests/rabbitmq-cluster.sh NACKGUARD_TEST_CLUSTER_FAIL_JOIN)."""
    global _lock_file
    t0 = time.monotonic()
    if _lock_file is None:
        _lock_file = open(LOCK_PATH, "a")
        fcntl.flock(_lock_file, fcntl.LOCK_EX)
    env = dict(os.environ, NACKGUARD_TEST_CLUSTER_VERSION=VERSION)
    if fail_join is not None:
        env["NACKGUARD_TEST_CLUSTER_FAIL_JOIN"] = fail_join.name
    output = _run([CLUSTER_SCRIPT, "start", CLUSTER_DIR], env=env, timeout=START_TIMEOUT,
                  want_stderr=True)
    use_node(NODES[0])
    return time.monotonic() - t0, output


def stop_cluster():
    """Waits for nodes still starting, stops the three nodes (unless KEEP), releases the
    lock."""
    global _lock_file
    try:
        for process in list(_pending.values()):
            process.communicate(timeout=NODE_TIMEOUT)
        _pending.clear()
        if not KEEP:
            _run([CLUSTER_SCRIPT, "stop", CLUSTER_DIR], timeout=START_TIMEOUT)
    finally:
        if _lock_file is not None:
            _lock_file.close()  # releases the flock
            _lock_file = None


def stop_node(node):
    """Stops one node (rabbitmqctl stop: its clients get connection.close 320 first)."""
    _run([NODE_SCRIPT, "stop", node.dir], env=_node_env(node))


def kill_node(node, timeout=20):
    """SIGKILLs the node's Erlang VM (the pid tests/rabbitmq-node.sh recorded when it started
    the node, checked to be that node's VM): the node dies without closing anything, as on a
    crash or a lost machine. Returns once its AMQP port refuses connections."""
    with open(os.path.join(node.dir, "beam.pid")) as f:
        pid = int(f.read().strip())
    with open(f"/proc/{pid}/environ", "rb") as f:
        environ = f.read().split(b"\0")
    if f"RABBITMQ_NODENAME={node.name}".encode() not in environ:
        raise AssertionError(f"pid {pid} in {node.dir}/beam.pid is not {node.name}'s VM")
    os.kill(pid, signal.SIGKILL)
    if not wait_for(lambda: not node.accepts(), timeout):
        raise AssertionError(f"{node} still accepts connections {timeout} s after SIGKILL")


_pending = {}  # node index -> Popen of a start still running


def start_nodes(nodes):
    """Starts the nodes at once (a 4.3 node boots only beside a majority of the cluster) and
    returns when every one has booted."""
    for node in nodes:
        start_node_async(node)
    _wait_pending()


def start_node_async(node):
    """Starts a node in the background; ensure_all_running() waits for it."""
    _pending[node.index] = subprocess.Popen(
        [NODE_SCRIPT, "start", node.dir], env=_node_env(node), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)


def ensure_all_running():
    """Waits for background starts, then starts (at once) any node that is down."""
    _wait_pending()
    start_nodes([node for node in NODES if not node.accepts()])


def _wait_pending():
    for index, process in list(_pending.items()):
        out, _ = process.communicate(timeout=NODE_TIMEOUT)
        del _pending[index]
        if process.returncode != 0:
            raise AssertionError(f"starting {NODES[index]} failed:\n{out}")


def use_node(node):
    """Direct connections (redelivery_support.Broker, harness.delete_queue) and
    harness.rabbitmqctl go to `node` from now on."""
    harness.BROKER_PORT = node.port
    harness.RABBITMQCTL = node.ctl_path


def use_live_node(avoid=()):
    """use_node() on the first node that is up and not in `avoid`; returns it."""
    for node in NODES:
        if node not in avoid and node.accepts():
            use_node(node)
            return node
    raise AssertionError(f"no cluster node is up (besides {list(avoid)})")


def ctl(node, *args, timeout=60):
    return _run([node.ctl_path, *args], timeout=timeout)


def queue_info(queue, via):
    """{"name", "type", "leader", "members", ...} of `queue` as node `via` lists it, or None."""
    out = ctl(via, "-q", "list_queues", "name", "type", "leader", "members", "messages",
              "--formatter", "json")
    for row in json.loads(out or "[]"):
        if row.get("name") == queue:
            return row
    return None


def queue_leader(queue, via):
    """The node holding the leader of quorum queue `queue` (asked of node `via`)."""
    info = queue_info(queue, via)
    if info is None:
        raise AssertionError(f"queue {queue!r} not found (asked {via})")
    leader = info.get("leader")
    if not leader or leader == "":
        raise AssertionError(f"queue {queue!r} has no leader: {info}")
    return node_named(leader)


def proxy_config(connect_timeout="2s", **extra):
    """OpsProxy config keys: upstream.addresses lists the three nodes."""
    config = {"upstream": {"addresses": [node.address for node in NODES],
                           "connect_timeout": connect_timeout}}
    config.update(extra)
    return config


def serving_nodes(proxy):
    """{node: open upstream connections} of the nodes the proxy is connected to now."""
    page = proxy.metrics()
    out = {}
    for labels, value in page.series("nackguard_upstream_connections"):
        if value > 0:
            out[node_at(labels["address"])] = int(value)
    return out


# ---------------------------------------------------------------- test base

class ClusterTest(ops.OpsTest):
    """OpsTest in front of the cluster: every node up before each test, direct connections
    to a live node, nackguards listing the three nodes."""

    def setUp(self):
        ensure_all_running()  # a node a previous test stopped is back
        use_node(NODES[0])
        super().setUp()

    def declare_quorum(self, queue):
        self.broker.declare(queue, durable=True, arguments=QUORUM_ARGS)

    def reconnect_broker(self, avoid=()):
        """Direct connections and clean-ups go to a live node not in `avoid` from now on."""
        node = use_live_node(avoid)
        try:
            self.broker.close()
        except Exception:
            pass
        self.broker = rs.Broker()
        self.addCleanup(self.broker.close)
        return node

    def start_cluster_proxy(self, policies, **config):
        proxy = self.start_ops(policies, config=proxy_config(**config))
        status, body = proxy.wait_ready(200, 10)
        self.assertEqual(status, 200, f"/readyz: {body!r}")
        return proxy

    def the_serving_node(self, proxy):
        serving = serving_nodes(proxy)
        self.assertEqual(list(serving.values()), [1],
                         f"expected one upstream connection, the gauge says {serving}")
        return next(iter(serving))

    def stop_serving_node(self, proxy, state):
        """Stops the node the proxy's only upstream connection uses; remembers it in state."""
        node = self.the_serving_node(proxy)
        state["stopped"] = node
        self.reconnect_broker(avoid=[node])
        t0 = time.monotonic()
        stop_node(node)
        state["stop_seconds"] = time.monotonic() - t0
        self.addCleanup(start_node_async, node)  # the next test finds it back
        return node

    def consumer(self, proxy, queue, decide, prefetch=50):
        c = ReconnectingConsumer(proxy.port, queue, decide, prefetch=prefetch)
        self.addCleanup(c.close)
        return c
