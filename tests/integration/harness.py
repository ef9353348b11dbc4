"""Shared helpers for nackguard's integration tests.

Environment (set by tests/run.sh and CTest):
  NACKGUARD_BIN               the proxy executable (default: $NACKGUARD_BUILD_DIR/nackguard)
  NACKGUARD_BUILD_DIR         build directory; temp files go to $NACKGUARD_BUILD_DIR/it-tmp
  NACKGUARD_TEST_BROKER_PORT  AMQP port of the private RabbitMQ node on 127.0.0.1 (21672)
  NACKGUARD_TEST_RABBITMQCTL  rabbitmqctl wrapper for that node (optional)
  NACKGUARD_TEST_QUEUE_TYPE   classic (default) or quorum: the type of the queues the
                              redelivery scenarios declare (declare_queue(), queue_kwargs())
  NACKGUARD_TEST_RABBITMQ_VERSION  the variant's broker version: 4.0 or 4.3 (unset: 3.10);
                              RABBITMQ_VERSION here
Developer overrides:
  NACKGUARD_IT_DIRECT_ONLY=1  start no proxy: every "through the proxy" leg goes to
                              the broker directly (tests that need a proxy skip)
  NACKGUARD_IT_PROXY_LOG_LEVEL  log level written into the proxy's config (info)
  NACKGUARD_IT_KEEP_TMP=1     keep the proxies' temp dirs (configs and logs)
  NACKGUARD_IT_TEST_TIMEOUT   seconds one test may take (150); then the watchdog prints
                              every thread's stack and the proxies' logs, stops the
                              proxies and exits, instead of hanging on a lost reply

What is here:
  Proxy, Watchdog    one proxy process with a generated config on free ports, and the
                     watchdog that ends a hung test (proxy_process.py, re-exported here)
  IntegrationTest    unittest base class: one shared proxy per test class in front of the
                     broker, run_both() to run a scenario directly and through the proxy,
                     the proxies' logs printed when a test fails
  unique_queue()     a unique queue name per test, deleted afterwards
  connect()          a pika BlockingConnection with the tests' defaults
  typed()/describe_properties()  type-exact normal forms of pika values for comparison
  QUEUE_TYPE, queue_kwargs(), declare_queue()  the run's queue type: a quorum queue is
                     durable with x-queue-type quorum (never exclusive or auto-delete)
  broker_version()   the test broker's version from its connection.start, e.g. (4, 0, 5)
  broker_counts_nacks(), broker_default_delivery_limit()  how the test broker's quorum queues
                     count returns (RabbitMQ 4.3 changed it), for tests to branch on
"""

import collections
import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
import unittest
import uuid

import pika

import waiting
from proxy_process import (  # noqa: F401  (re-exported: the tests say harness.X)
    BROKER_HOST, BUILD_DIR, HERE, KEEP_TMP, PROXY_BIN, PROXY_LOG_LEVEL, PROXY_READY_TIMEOUT,
    PROXY_STOP_GRACE, REPO_ROOT, TEST_TIMEOUT, Proxy, ProxyError, Watchdog, _live_proxies,
    free_port, run_showing_logs, tmp_root, wait_for_port)


BROKER_PORT = int(os.environ.get("NACKGUARD_TEST_BROKER_PORT") or "21672")
DIRECT_ONLY = os.environ.get("NACKGUARD_IT_DIRECT_ONLY", "") not in ("", "0")
_ctl = os.environ.get("NACKGUARD_TEST_RABBITMQCTL") or ""
RABBITMQCTL = _ctl if _ctl and os.access(_ctl, os.X_OK) else None

RABBITMQ_VERSION = os.environ.get("NACKGUARD_TEST_RABBITMQ_VERSION") or "3.10"
QUEUE_TYPE = os.environ.get("NACKGUARD_TEST_QUEUE_TYPE") or "classic"
if QUEUE_TYPE not in ("classic", "quorum"):
    raise SystemExit(f"NACKGUARD_TEST_QUEUE_TYPE={QUEUE_TYPE!r}: use classic or quorum")


def lock_file(path, holder, timeout=600):
    """Opens `path` and takes an exclusive flock on it, waiting up to `timeout` s; returns
    the open file (closing it releases the lock). `holder` names who may hold it, for the
    error. Keeps two runs (from different build directories) off one private node."""
    import fcntl
    lock = open(path, "a")

    def take():
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False

    if not waiting.wait_for(take, timeout, 1):
        lock.close()
        raise AssertionError(f"{path} stayed locked for {timeout:.0f} s: {holder}")
    return lock


# ---------------------------------------------------------------- pika helpers

def connection_params(port, **overrides):
    params = dict(host=BROKER_HOST, port=port,
                  credentials=pika.PlainCredentials("guest", "guest"),
                  virtual_host="/", connection_attempts=1, socket_timeout=5,
                  stack_timeout=15, blocked_connection_timeout=30)
    params.update(overrides)
    return pika.ConnectionParameters(**params)


def connect(port, **overrides):
    return pika.BlockingConnection(connection_params(port, **overrides))


def _connection_socket(conn):
    transport = getattr(getattr(conn, "_impl", None), "_transport", None)
    return getattr(transport, "_sock", None)


def close_connection(conn, timeout=5.0):
    """Closes a pika BlockingConnection without hanging on an unresponsive peer.

    pika's close() waits for connection.close-ok with no time limit; if none comes
    within `timeout`, the socket is shut down under it so the close completes.
    Returns True when the connection closed cleanly (close-ok in time), False when
    it had to be aborted or failed, None when it was not open.
    """
    if conn is None or not conn.is_open:
        return None
    sock = _connection_socket(conn)
    aborted = threading.Event()

    def abort():
        aborted.set()
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    timer = threading.Timer(timeout, abort) if sock is not None else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    try:
        conn.close()
        clean = True
    except Exception:
        clean = False
    finally:
        if timer is not None:
            timer.cancel()
    return clean and not aborted.is_set()


def delete_queue(name, port=None):
    """Deletes a queue through a fresh direct connection (works whatever the test left); on
    the test broker unless `port` names another node's AMQP port."""
    conn = connect(port or BROKER_PORT)
    try:
        conn.channel().queue_delete(name)
    finally:
        close_connection(conn)


@contextlib.contextmanager
def unique_queue(tag="q"):
    """A queue name unique to this test run; the queue is deleted on exit."""
    name = f"nackguard-it.{tag}.{uuid.uuid4().hex[:12]}"
    try:
        yield name
    finally:
        try:
            delete_queue(name)
        except Exception as exc:  # cleanup must not hide the test's own failure
            print(f"warning: could not delete queue {name}: {exc!r}", file=sys.stderr)


def queue_kwargs(durable=False, arguments=None, queue_type=None):
    """queue_declare keyword arguments for a test queue of `queue_type` (default: the run's
    NACKGUARD_TEST_QUEUE_TYPE). A classic queue is declared exactly as asked (no
    x-queue-type argument, as before the switch existed); a quorum queue is always durable
    and carries x-queue-type quorum after the caller's own arguments."""
    queue_type = queue_type or QUEUE_TYPE
    if queue_type == "classic":
        return {"durable": durable, "arguments": arguments}
    args = dict(arguments or {})
    args["x-queue-type"] = queue_type
    return {"durable": True, "arguments": args}


def declare_queue(channel, name, durable=False, arguments=None, queue_type=None):
    """Declares a test queue of the run's queue type (see queue_kwargs) on a pika channel."""
    return channel.queue_declare(name, **queue_kwargs(durable, arguments, queue_type))


_broker_version = None


def broker_version():
    """The test broker's version as a tuple of ints, from its connection.start."""
    global _broker_version
    if _broker_version is None:
        conn = connect(BROKER_PORT)
        try:
            raw = conn._impl.server_properties.get("version", "0")
        finally:
            close_connection(conn)
        raw = raw.decode() if isinstance(raw, bytes) else str(raw)
        _broker_version = tuple(int(p) for p in raw.split("+")[0].split("-")[0].split(".")
                                if p.isdigit())
    return _broker_version


# Measured directly on 3.10.8, 4.0.5 and 4.3.6 (pika, no proxy), quorum queues:
#   3.10 and 4.0 (4.1 and 4.2 alike, by their release notes): every return counts in
#     x-delivery-count and against the delivery limit: basic.nack and basic.reject with
#     requeue=true, and each unacked message of a channel or connection that closed (a crash).
#   4.3: basic.nack(requeue=true) is not counted at all (a message only ever nacked carries no
#     x-delivery-count), while basic.reject(requeue=true) and a crash count 1 each; every
#     redelivery carries the new x-acquired-count (deliveries before this one, nacks included).
#   A message's first delivery carries neither header, except that 3.10's basic.get-ok gives
#   x-delivery-count 0. A delivery-limit policy and an x-delivery-limit argument: the lower
#   one applies, on every version.
def broker_counts_nacks():
    """Whether the test broker's quorum queues count basic.nack(requeue=true) in
    x-delivery-count and against their delivery limit: RabbitMQ 3.x and 4.0 to 4.2 do; 4.3
    does not (only rejects and crashes count), so a nack loop there never reaches the limit."""
    return broker_version() < (4, 3)


def broker_default_delivery_limit():
    """The delivery limit of a quorum queue declared with none and no policy: 20 on RabbitMQ
    4.x, none (None) before."""
    return 20 if broker_version() >= (4,) else None


def typed(value):
    """A normal form of a decoded pika value that keeps every type.

    True != 1, b"a" != "a", Decimal("1.0") != Decimal("1"), and dict order counts
    (pika decodes a field table in wire order).
    """
    if isinstance(value, dict):
        return ("dict", tuple((typed(k), typed(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(typed(v) for v in value))
    return (type(value).__name__, repr(value))


PROPERTY_NAMES = ("content_type", "content_encoding", "headers", "delivery_mode", "priority",
                  "correlation_id", "reply_to", "expiration", "message_id", "timestamp",
                  "type", "user_id", "app_id", "cluster_id")


def describe_properties(props):
    """All 14 basic properties of a pika BasicProperties in type-exact normal form."""
    return tuple((name, typed(getattr(props, name))) for name in PROPERTY_NAMES)


def drain(connection, done, timeout, step=0.05):
    """Runs pika's I/O loop until done() is true; False if the timeout passed first."""
    deadline = time.monotonic() + timeout
    while not done():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        connection.process_data_events(time_limit=min(step, remaining))
    return True


def wait_message_count(channel, queue, expected, timeout=5.0):
    """Polls queue.declare(passive) until the count is `expected`; returns the last count.

    Publishes without confirms reach a queue asynchronously, so a count taken right
    after publishing may still be short.
    """
    return waiting.poll(lambda: channel.queue_declare(queue, passive=True).method.message_count,
                        lambda count: count == expected, timeout, 0.02,
                        sleep=channel.connection.sleep)


def get_message(channel, queue, timeout=5.0):
    """Polls basic.get (auto-ack) until a message comes, `timeout` s at most; returns the
    last (method, properties, body): method None if none came. A message published without
    confirms reaches its queue asynchronously."""
    return waiting.poll(lambda: channel.basic_get(queue, auto_ack=True),
                        lambda got: got[0] is not None, timeout, 0.02,
                        sleep=channel.connection.sleep)


def rabbitmqctl(*args, timeout=60):
    if RABBITMQCTL is None:
        raise unittest.SkipTest("NACKGUARD_TEST_RABBITMQCTL is not set")
    result = subprocess.run([RABBITMQCTL, *args], capture_output=True, text=True,
                            timeout=timeout)
    if result.returncode != 0:
        raise AssertionError(f"rabbitmqctl {' '.join(args)} failed ({result.returncode}): "
                             f"{result.stderr or result.stdout}")
    return result.stdout


# ---------------------------------------------------------------- test base class

Target = collections.namedtuple("Target", "name port")


class IntegrationTest(unittest.TestCase):
    """Base class: a shared proxy per test class, in front of the real broker.

    With NACKGUARD_IT_DIRECT_ONLY=1 no proxy is started and `proxy_port` is the
    broker's port, so every scenario runs twice against the broker.
    """

    maxDiff = 4000
    shared_proxy = None
    wants_shared_proxy = True  # False: the tests start their own proxies
    shared_proxy_threads = 2  # the shared proxy's `threads`

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        check_broker()
        cls.shared_proxy = None
        if cls.wants_shared_proxy and not DIRECT_ONLY:
            proxy = Proxy(BROKER_PORT, name=f"{cls.__name__}-proxy",
                          threads=cls.shared_proxy_threads)
            proxy.start()
            cls.shared_proxy = proxy

    @classmethod
    def tearDownClass(cls):
        if cls.shared_proxy is not None:
            cls.shared_proxy.cleanup()
            cls.shared_proxy = None
        super().tearDownClass()

    def setUp(self):
        super().setUp()
        self._test_proxies = []
        watchdog = Watchdog(self.id()).start()
        self.addCleanup(watchdog.cancel)
        if self.shared_proxy is not None:
            self.addCleanup(self._check_shared_proxy_alive)

    def _check_shared_proxy_alive(self):
        if not self.shared_proxy.alive():
            self.fail(f"the shared proxy exited (code {self.shared_proxy.process.returncode}) "
                      f"during {self.id()}")

    # Print every proxy's log when a test fails or errors.
    def run(self, result=None):
        outcome, _ = run_showing_logs(self, result, super().run, self._proxies_to_show)
        # Only now, with the logs of a failed test shown and kept, may the directories go.
        for proxy in getattr(self, "_test_proxies", []):
            proxy.remove_dir()
        return outcome

    def _proxies_to_show(self):
        proxies = list(getattr(self, "_test_proxies", []))
        if self.shared_proxy is not None:
            proxies.insert(0, self.shared_proxy)
        return proxies

    @property
    def proxy_port(self):
        return BROKER_PORT if self.shared_proxy is None else self.shared_proxy.port

    def targets(self):
        return [Target("direct", BROKER_PORT), Target("proxy", self.proxy_port)]

    def run_both(self, scenario, *args, **kwargs):
        """Runs scenario(target, ...) directly, then through the proxy; returns both results."""
        direct = scenario(Target("direct", BROKER_PORT), *args, **kwargs)
        proxied = scenario(Target("proxy", self.proxy_port), *args, **kwargs)
        return direct, proxied

    def assertSameThroughProxy(self, direct, proxied, what="result"):
        self.assertEqual(direct, proxied, f"{what} through the proxy differs from the "
                                          "broker's direct answer")

    def require_proxy(self):
        if DIRECT_ONLY:
            self.skipTest("needs the proxy (NACKGUARD_IT_DIRECT_ONLY=1)")

    def start_proxy(self, upstream_port, upstream_host=BROKER_HOST, name=None):
        """Starts an extra proxy for this test only (stopped at cleanup)."""
        proxy = Proxy(upstream_port, upstream_host,
                      name=name or f"{self._testMethodName}-proxy")
        self._test_proxies.append(proxy)
        self.addCleanup(proxy.cleanup)
        proxy.start()
        return proxy


_broker_checked = False


def check_broker():
    """Fails (not skips) when the test broker is not reachable: the run is misconfigured."""
    global _broker_checked
    if _broker_checked:
        return
    if not wait_for_port(BROKER_PORT, 5.0):
        raise AssertionError(f"no RabbitMQ on 127.0.0.1:{BROKER_PORT} "
                             "(NACKGUARD_TEST_BROKER_PORT); start it with tests/run.sh or "
                             "tests/rabbitmq-node.sh")
    _broker_checked = True
