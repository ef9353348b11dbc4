"""The ledger test's three-node cluster: tests/rabbitmq-cluster.sh through the integration
tests' cluster_support.py (its nodes, its lock, its start and stop), plus what the nemesis and
the checker need of it: a node's app stopped and started (rabbitmqctl stop_app / start_app),
a quorum queue's members all online again, and a queue's message counts.

NACKGUARD_LEDGER_VERSION (3.10 or 4.3) chooses the cluster; it is handed on to cluster_support
as NACKGUARD_TEST_CLUSTER_VERSION, which it reads when imported. NACKGUARD_TEST_CLUSTER_DIR
and NACKGUARD_TEST_CLUSTER_KEEP=1 are cluster_support's (where the nodes live; leave them
running after the run)."""

import json
import os

if os.environ.get("NACKGUARD_LEDGER_VERSION"):
    os.environ["NACKGUARD_TEST_CLUSTER_VERSION"] = os.environ["NACKGUARD_LEDGER_VERSION"]

import rawamqp  # noqa: E402,F401  (first: it puts tests/integration on sys.path)
import cluster_support as cs  # noqa: E402
import waiting  # noqa: E402

NODES = cs.NODES
VERSION = cs.VERSION
QUORUM_ARGS = cs.QUORUM_ARGS
CTL_TIMEOUT = 120


def start():
    """Takes the cluster's lock and boots it (or reuses it); returns the seconds it took."""
    seconds, _ = cs.start_cluster()
    ensure_all_up()
    return seconds


def stop():
    cs.stop_cluster()


def live_nodes(avoid=()):
    return [node for node in NODES if node not in avoid and node.accepts()]


def some_live_node(avoid=()):
    nodes = live_nodes(avoid)
    if not nodes:
        raise AssertionError(f"no cluster node accepts AMQP connections (avoiding {avoid})")
    return nodes[0]


def stop_app(node):
    """rabbitmqctl stop_app: the node's AMQP listener closes (its clients get 320), its VM and
    its data stay; the quorum queues keep a majority on the other two."""
    cs.ctl(node, "-q", "stop_app", timeout=CTL_TIMEOUT)


def start_app(node):
    cs.ctl(node, "-q", "start_app", timeout=CTL_TIMEOUT)
    cs.ctl(node, "-q", "await_startup", "--timeout", str(CTL_TIMEOUT), timeout=CTL_TIMEOUT + 10)


def ensure_all_up():
    """Every node's app runs: one a run left stopped (stop_app) is started, one whose VM is
    down is started by the cluster script's node start."""
    for node in NODES:
        if not node.accepts():
            try:
                start_app(node)
            except AssertionError:
                pass  # its VM is down: cluster_support starts it
    cs.ensure_all_running()


def queue_rows(via=None):
    """{name: row} of list_queues (name, type, members, online, messages, unacked)."""
    via = via or some_live_node()
    out = cs.ctl(via, "-q", "list_queues", "name", "type", "members", "online", "messages",
                 "messages_ready", "messages_unacknowledged", "--formatter", "json",
                 timeout=CTL_TIMEOUT)
    return {row["name"]: row for row in json.loads(out or "[]")}


def quorum_queues_online(prefixes, via=None):
    """Whether every quorum queue whose name starts with one of `prefixes` has each of its
    members online."""
    for name, row in queue_rows(via).items():
        if row.get("type") != "quorum" or not name.startswith(tuple(prefixes)):
            continue
        members = row.get("members") or []
        online = row.get("online") or []
        if not members or set(online) != set(members):
            return False
    return True


def wait_quorum_online(prefixes, timeout):
    """Polls until every member of those quorum queues is online; whether it happened."""
    def online():
        try:
            return quorum_queues_online(prefixes)
        except AssertionError:
            return False  # a node went away while it was asked: ask again

    return waiting.wait_for(online, timeout, 0.5)


def queues_named(prefix, via=None):
    return sorted(name for name in queue_rows(via) if name.startswith(prefix))
