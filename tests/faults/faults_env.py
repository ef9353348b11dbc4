"""The fault tests' settings (environment, the private node's ports, the queue type), small
waits, and pika access to the private node. faults_support.py re-exports all of it."""

import logging
import os
import socket
import sys
import threading
import time
import uuid

import pika
import pika.exceptions

import rawamqp  # noqa: F401  (first: it puts tests/integration on sys.path)
import waiting  # noqa: E402  (from tests/integration)
import proxy_process  # noqa: E402  (tests/integration)


HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD_DIR = os.path.abspath(os.environ.get("NACKGUARD_BUILD_DIR") or
                            os.path.join(REPO_ROOT, "build"))
PROXY_BIN = os.environ.get("NACKGUARD_BIN") or os.path.join(BUILD_DIR, "nackguard")
RABBITMQ_VERSION = os.environ.get("NACKGUARD_FAULTS_RABBITMQ_VERSION") or "3.10"
# The private node of each version: (directory, node name, AMQP, distribution, epmd port).
_NODE_DEFAULTS = {
    "3.10": ("faults-rabbitmq", "nackguard-faults@localhost", 26672, 26673, 26369),
    "4.0": ("faults-rabbitmq-4.0", "nackguard-faults40@localhost", 27672, 27673, 27369),
    # The faults.<module>.rmq43 tests' (tests/faults/CMakeLists.txt).
    "4.3": ("faults-rabbitmq-4.3", "nackguard-faults43@localhost", 27772, 27773, 27469),
}
if RABBITMQ_VERSION not in _NODE_DEFAULTS:
    sys.exit(f"faults: NACKGUARD_FAULTS_RABBITMQ_VERSION={RABBITMQ_VERSION!r}: use "
             f"{' or '.join(_NODE_DEFAULTS)}")
_node_dir, _node_name, _amqp, _dist, _epmd = _NODE_DEFAULTS[RABBITMQ_VERSION]
NODE_DIR = os.path.join(BUILD_DIR, _node_dir)
NODE_NAME = os.environ.get("NACKGUARD_FAULTS_NODE") or _node_name
# Seconds the node may take to boot: a fresh 4.3 node's first boot took over 90 s here.
NODE_START_TIMEOUT = 300 if RABBITMQ_VERSION == "4.3" else 150
BROKER_HOST = "127.0.0.1"
BROKER_PORT = int(os.environ.get("NACKGUARD_FAULTS_BROKER_PORT") or _amqp)
DIST_PORT = int(os.environ.get("NACKGUARD_FAULTS_DIST_PORT") or _dist)
EPMD_PORT = int(os.environ.get("NACKGUARD_FAULTS_EPMD_PORT") or _epmd)
QUEUE_TYPE = (os.environ.get("NACKGUARD_TEST_QUEUE_TYPE") or "classic").strip().lower()
if QUEUE_TYPE not in ("classic", "quorum"):
    sys.exit(f"faults: NACKGUARD_TEST_QUEUE_TYPE={QUEUE_TYPE!r}: use classic or quorum")
# What the tests declare their queues with.
QUEUE_ARGUMENTS = {"x-queue-type": "quorum"} if QUEUE_TYPE == "quorum" else None
# The tests declare their queues directly, not through the proxy, and consume with
# basic.consume, whose deliveries carry x-delivery-count only from a message's first
# redelivery on (RabbitMQ 3.10 and 4.0 alike): a copy delayed at a message's first return
# would go to a classic delay queue. The policies say `queue_type: quorum`, as
# docs/choosing-a-policy.md tells users of queues declared elsewhere.
POLICY_QUEUE_TYPE = "quorum" if QUEUE_TYPE == "quorum" else None
KEEP_TMP = os.environ.get("NACKGUARD_FAULTS_KEEP_TMP", "") not in ("", "0")
TEST_TIMEOUT = float(os.environ.get("NACKGUARD_FAULTS_TEST_TIMEOUT") or "300")
RESULTS_DIR = os.path.join(BUILD_DIR, "faults-results")
# One fault-test module at a time per machine: the node name and ports are fixed, so two
# runs from different build directories would share (and stop, kill and SIGSTOP) one node.
LOCK_PATH = os.environ.get("NACKGUARD_FAULTS_LOCK") or \
    f"/tmp/nackguard-faults-{NODE_NAME.split('@')[0]}-{BROKER_PORT}.lock"
LOCK_WAIT = float(os.environ.get("NACKGUARD_FAULTS_LOCK_WAIT") or "1200")

# pika logs every failed connection attempt at ERROR; the tests record them themselves.
logging.getLogger("pika").setLevel(logging.CRITICAL)

# What a client sees when its connection ends: a clean close or a lost stream (not a hang).
CONNECTION_ERRORS = (pika.exceptions.AMQPConnectionError, pika.exceptions.ChannelClosed,
                     pika.exceptions.ChannelWrongStateError,
                     pika.exceptions.ConnectionWrongStateError, ConnectionError, OSError)


def log(msg):
    print(f"[faults {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


free_port = proxy_process.free_port
wait_for_port = proxy_process.wait_for_port


def wait_until(cond, timeout, step=0.1):
    """Whether cond() held within `timeout` s (waiting.wait_for)."""
    return bool(waiting.wait_for(cond, timeout, step))


def tmp_root():
    path = os.path.join(BUILD_DIR, "faults-tmp")
    os.makedirs(path, exist_ok=True)
    return path


# ---------------------------------------------------------------- pika helpers

def params(port, **overrides):
    p = dict(host=BROKER_HOST, port=port, credentials=pika.PlainCredentials("guest", "guest"),
             virtual_host="/", connection_attempts=1, socket_timeout=4, stack_timeout=8,
             blocked_connection_timeout=60)
    p.update(overrides)
    return pika.ConnectionParameters(**p)


def connect(port, **overrides):
    return pika.BlockingConnection(params(port, **overrides))


def close_quietly(conn, timeout=3.0):
    if conn is None or not conn.is_open:
        return
    sock = getattr(getattr(getattr(conn, "_impl", None), "_transport", None), "_sock", None)
    timer = None
    if sock is not None:
        def abort():
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        timer = threading.Timer(timeout, abort)
        timer.daemon = True
        timer.start()
    try:
        conn.close()
    except Exception:
        pass
    finally:
        if timer is not None:
            timer.cancel()


def declare_queues(*names, durable=True):
    """Declares the queues directly, of QUEUE_TYPE (a quorum queue is always durable)."""
    conn = connect(BROKER_PORT)
    try:
        ch = conn.channel()
        for name in names:
            ch.queue_declare(name, durable=durable or QUEUE_ARGUMENTS is not None,
                             arguments=QUEUE_ARGUMENTS)
    finally:
        close_quietly(conn)


def delete_queues(*names):
    try:
        conn = connect(BROKER_PORT)
    except Exception:
        return
    try:
        ch = conn.channel()
        for name in names:
            try:
                ch.queue_delete(name)
            except Exception:
                ch = conn.channel()
    finally:
        close_quietly(conn)


def message_count(queue, port=BROKER_PORT):
    """Ready messages of a queue (passive declare, directly); None if it does not exist."""
    return passive_count(connect(port), queue)


def passive_count(conn, queue):
    """Ready messages of `queue` on `conn` (passive declare), which it then closes; None if
    the queue does not exist."""
    try:
        return conn.channel().queue_declare(queue, passive=True).method.message_count
    except pika.exceptions.ChannelClosedByBroker as exc:
        if exc.reply_code == 404:
            return None
        raise
    finally:
        close_quietly(conn)


def unique_queue(tag):
    return f"faults.{tag}.{uuid.uuid4().hex[:8]}"


def body_for(msg_id, size):
    head = f"{msg_id}|".encode()
    return head + b"x" * max(0, size - len(head))


def id_of(props, body):
    if props is not None and props.message_id:
        return props.message_id
    head, sep, _ = body[:80].partition(b"|")
    return head.decode(errors="replace") if sep else None


def number_of(msg_id):
    """The sequence number in an id such as "run-000123"."""
    try:
        return int(msg_id.rsplit("-", 1)[1])
    except (AttributeError, IndexError, ValueError):
        return -1
