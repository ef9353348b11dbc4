"""Shared machinery for nackguard's fault tests (tests/faults/test_*.py).

The fault tests break things on purpose: they stop, kill -9 and SIGSTOP a RabbitMQ node,
kill -9 the proxy and consumers, and feed the proxy hostile bytes. They never touch the
shared test broker (NACKGUARD_TEST_BROKER_PORT of tests/run.sh): each test module starts its
OWN private node with tests/rabbitmq-node.sh in setUpModule and stops it in tearDownModule.

Environment:
  NACKGUARD_BIN               the proxy executable (default $NACKGUARD_BUILD_DIR/nackguard)
  NACKGUARD_BUILD_DIR         build directory (default: build); the node lives in
                              $NACKGUARD_BUILD_DIR/faults-rabbitmq, temp files in
                              $NACKGUARD_BUILD_DIR/faults-tmp, results in
                              $NACKGUARD_BUILD_DIR/faults-results
  NACKGUARD_FAULTS_RABBITMQ_VERSION  3.10 (default) or 4.0: the private node's RabbitMQ
                              (passed to tests/rabbitmq-node.sh as
                              NACKGUARD_TEST_RABBITMQ_VERSION); it also chooses the defaults
                              of the next four and the node's directory
                              ($NACKGUARD_BUILD_DIR/faults-rabbitmq, faults-rabbitmq-4.0)
  NACKGUARD_FAULTS_NODE, NACKGUARD_FAULTS_BROKER_PORT, NACKGUARD_FAULTS_DIST_PORT,
  NACKGUARD_FAULTS_EPMD_PORT  the private node (3.10: nackguard-faults@localhost, 26672,
                              26673, 26369; 4.0: nackguard-faults40@localhost, 27672, 27673,
                              27369); passed to tests/rabbitmq-node.sh as its
                              NACKGUARD_TEST_* variables
  NACKGUARD_TEST_QUEUE_TYPE   classic (default) or quorum: the type of the queues the tests
                              declare (quorum: durable, x-queue-type quorum)
  NACKGUARD_FAULTS_KEEP_TMP=1 keep the proxies' directories (configs, policies, logs)
  NACKGUARD_FAULTS_TEST_TIMEOUT  seconds one test may take before the watchdog dumps every
                              thread's stack and the proxies' logs and exits (300)

What is here:
  Node            the private RabbitMQ node: start/stop, stop_app/start_app, kill -9 and
                  restart, SIGSTOP/SIGCONT, rabbitmqctl
  FaultProxy      one nackguard process on a fixed port (so that it can be killed and
                  restarted in place) with a generated config and policies
  Ledger          the accounting: published / confirmed / consumed / dead-lettered /
                  duplicated / lost, with drain_and_account() doing the final count
  Publisher, Consumer   pika threads with publisher confirms and reconnects
  consumer_main   a consumer child process (kill -9 target), run as
                  `python3 faults_support.py consume ...`
  FaultTest       unittest base: watchdog, proxies' logs printed on failure, results written
"""

import collections
import fcntl
import json
import logging
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import unittest
import urllib.request
import uuid

import pika
import pika.exceptions

import rawamqp  # first: it puts tests/integration on sys.path
import proxy_process  # noqa: E402  (tests/integration)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD_DIR = os.path.abspath(os.environ.get("NACKGUARD_BUILD_DIR") or
                            os.path.join(REPO_ROOT, "build"))
PROXY_BIN = os.environ.get("NACKGUARD_BIN") or os.path.join(BUILD_DIR, "nackguard")
NODE_SCRIPT = os.path.join(REPO_ROOT, "tests", "rabbitmq-node.sh")
RABBITMQ_VERSION = os.environ.get("NACKGUARD_FAULTS_RABBITMQ_VERSION") or "3.10"
# The private node of each version: (directory, node name, AMQP, distribution, epmd port).
_NODE_DEFAULTS = {
    "3.10": ("faults-rabbitmq", "nackguard-faults@localhost", 26672, 26673, 26369),
    "4.0": ("faults-rabbitmq-4.0", "nackguard-faults40@localhost", 27672, 27673, 27369),
}
if RABBITMQ_VERSION not in _NODE_DEFAULTS:
    sys.exit(f"faults: NACKGUARD_FAULTS_RABBITMQ_VERSION={RABBITMQ_VERSION!r}: use "
             f"{' or '.join(_NODE_DEFAULTS)}")
_node_dir, _node_name, _amqp, _dist, _epmd = _NODE_DEFAULTS[RABBITMQ_VERSION]
NODE_DIR = os.path.join(BUILD_DIR, _node_dir)
NODE_NAME = os.environ.get("NACKGUARD_FAULTS_NODE") or _node_name
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
    deadline = time.monotonic() + timeout
    while True:
        if cond():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(step)


def tmp_root():
    path = os.path.join(BUILD_DIR, "faults-tmp")
    os.makedirs(path, exist_ok=True)
    return path


# ---------------------------------------------------------------- process resources

def rss_kb(pid):
    """VmRSS of a process in KiB (None if it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def fd_count(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def settled_fd_count(pid, seconds=1.0, step=0.05):
    """The fewest fds a process had over `seconds`: a baseline without the short-lived
    sockets the proxy opens now and then (its upstream probe every 5 s, a port check)."""
    counts = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        n = fd_count(pid)
        if n is not None:
            counts.append(n)
        time.sleep(step)
    return min(counts) if counts else None


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


class Sampler(threading.Thread):
    """Samples a process's RSS and fd count every `interval` seconds."""

    def __init__(self, pid, interval=0.1):
        super().__init__(daemon=True)
        self.pid = pid
        self.interval = interval
        self.samples = []  # (monotonic, rss_kb, fds)
        self._halt = threading.Event()

    def run(self):
        while not self._halt.is_set():
            rss = rss_kb(self.pid)
            if rss is not None:
                self.samples.append((time.monotonic(), rss, fd_count(self.pid)))
            self._halt.wait(self.interval)

    def stop(self):
        self._halt.set()
        self.join(5)
        return self

    def max_rss_kb(self):
        return max((s[1] for s in self.samples), default=None)

    def max_fds(self):
        return max((s[2] for s in self.samples if s[2] is not None), default=None)


# ---------------------------------------------------------------- the private node

class NodeError(Exception):
    pass


class Node:
    """This suite's private RabbitMQ node (tests/rabbitmq-node.sh on NODE_DIR)."""

    def __init__(self, directory=NODE_DIR):
        self.dir = directory
        self.ctl_path = os.path.join(directory, "rabbitmqctl")
        self.port = BROKER_PORT
        self.started_by_us = False

    def _env(self, fresh=False):
        env = dict(os.environ)
        env.update({
            "NACKGUARD_TEST_NODE": NODE_NAME,
            "NACKGUARD_TEST_BROKER_PORT": str(BROKER_PORT),
            "NACKGUARD_TEST_DIST_PORT": str(DIST_PORT),
            "NACKGUARD_TEST_EPMD_PORT": str(EPMD_PORT),
            "NACKGUARD_TEST_RABBITMQ_VERSION": RABBITMQ_VERSION,
            "NACKGUARD_TEST_RABBITMQ_FRESH": "1" if fresh else "0",
            "NACKGUARD_TEST_START_TIMEOUT": "150",
        })
        return env

    def _script(self, action, fresh=False, timeout=240):
        t0 = time.monotonic()
        result = subprocess.run([NODE_SCRIPT, action, self.dir], env=self._env(fresh),
                                capture_output=True, text=True, timeout=timeout,
                                stdin=subprocess.DEVNULL)
        log(f"rabbitmq-node.sh {action}: exit {result.returncode} after "
            f"{time.monotonic() - t0:.1f}s")
        return result

    def answers(self):
        return wait_for_port(self.port, 0.5)

    def start(self, fresh=False):
        """Starts the node (or reuses it if it answers); returns the seconds it took."""
        t0 = time.monotonic()
        foreign = self.running_elsewhere()
        if foreign:
            raise NodeError(f"{NODE_NAME} is already running from another directory "
                            f"(pid, mnesia: {foreign}); these tests will not use or stop a "
                            "node they did not start. Stop it with tests/rabbitmq-node.sh "
                            "stop <its directory>, or set NACKGUARD_FAULTS_NODE and the "
                            "NACKGUARD_FAULTS_*_PORT variables for this run")
        result = self._script("start", fresh=fresh)
        if result.returncode != 0:
            raise NodeError(f"could not start the private node {NODE_NAME} in {self.dir}:\n"
                            f"{result.stderr[-4000:]}")
        if "reusing it" not in result.stderr:
            self.started_by_us = True
        self.beam_pid()  # this directory's VM, or NodeError
        if not wait_for_port(self.port, 30):
            raise NodeError(f"node {NODE_NAME} started but 127.0.0.1:{self.port} does not "
                            "accept connections")
        return time.monotonic() - t0

    def stop(self):
        result = self._script("stop")
        if result.returncode != 0:
            log(f"stopping {NODE_NAME} failed: {result.stderr[-2000:]}")

    def ctl(self, *args, timeout=90, check=True):
        result = subprocess.run([self.ctl_path, *args], capture_output=True, text=True,
                                timeout=timeout, stdin=subprocess.DEVNULL)
        if check and result.returncode != 0:
            raise NodeError(f"rabbitmqctl {' '.join(args)} failed ({result.returncode}): "
                            f"{result.stderr or result.stdout}")
        return result.stdout

    def _owns(self, pid):
        """True if pid is this node's Erlang VM *in this directory* (its environment names
        the node and this directory's mnesia): a stale pid file, a recycled pid, or the same
        node name started from another build directory never qualifies."""
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
        except (OSError, ValueError):
            return False
        return (env.get(b"RABBITMQ_NODENAME") == NODE_NAME.encode()
                and env.get(b"RABBITMQ_MNESIA_BASE") == os.path.join(self.dir, "mnesia").encode())

    def running_elsewhere(self):
        """Mnesia dirs of VMs running this node name from another directory."""
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    env = dict(i.split(b"=", 1) for i in f.read().split(b"\0") if b"=" in i)
            except (OSError, ValueError):
                continue
            if env.get(b"RABBITMQ_NODENAME") == NODE_NAME.encode() and not self._owns(int(entry)):
                found.append((int(entry), env.get(b"RABBITMQ_MNESIA_BASE", b"?").decode()))
        return found

    def beam_pid(self):
        """The pid of this directory's node VM; raises NodeError if there is none."""
        try:
            with open(os.path.join(self.dir, "beam.pid")) as f:
                pid = int(f.read().strip())
        except (OSError, ValueError):
            pid = None
        if pid is not None and self._owns(pid):
            return pid
        for entry in os.listdir("/proc"):
            if entry.isdigit() and self._owns(int(entry)):
                return int(entry)
        raise NodeError(f"no VM of {NODE_NAME} from {self.dir} is running")

    def stop_app(self):
        self.ctl("stop_app")

    def start_app(self):
        self.ctl("start_app")
        if not wait_for_port(self.port, 60):
            raise NodeError("start_app returned but the AMQP port does not answer")

    def kill9(self):
        pid = self.beam_pid()
        os.kill(pid, signal.SIGKILL)
        if not wait_until(lambda: not pid_alive(pid), 15):
            raise NodeError(f"beam pid {pid} still alive 15 s after SIGKILL")
        return pid

    def sigstop(self):
        os.kill(self.beam_pid(), signal.SIGSTOP)

    def sigcont(self):
        try:
            os.kill(self.beam_pid(), signal.SIGCONT)
        except (NodeError, ProcessLookupError):
            pass  # not running (any more): nothing to resume

    def queues(self, prefix=""):
        """{name: (ready, unacked)} of the queues whose name starts with prefix."""
        out = self.ctl("list_queues", "-q", "--no-table-headers", "name", "messages_ready",
                       "messages_unacknowledged")
        found = {}
        for line in out.splitlines():
            parts = line.split("\t") if "\t" in line else line.split()
            if len(parts) >= 3 and parts[0].startswith(prefix):
                try:
                    found[parts[0]] = (int(parts[1]), int(parts[2]))
                except ValueError:
                    pass
        return found


    def queue_types(self, prefix=""):
        """{name: type} (classic, quorum, ...) of the queues whose name starts with prefix."""
        out = self.ctl("list_queues", "-q", "--no-table-headers", "name", "type")
        found = {}
        for line in out.splitlines():
            parts = line.split("\t") if "\t" in line else line.split()
            if len(parts) >= 2 and parts[0].startswith(prefix):
                found[parts[0]] = parts[1]
        return found


_module_node = None
_module_lock = None


def acquire_machine_lock():
    """Waits (up to NACKGUARD_FAULTS_LOCK_WAIT s) until no other fault-test module on this
    machine holds LOCK_PATH; the lock is released with the process at the latest."""
    global _module_lock
    fd = os.open(LOCK_PATH, os.O_RDWR | os.O_CREAT, 0o666)
    deadline = time.monotonic() + LOCK_WAIT
    said = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if not said:
                try:
                    holder = os.pread(fd, 200, 0).decode(errors="replace").strip()
                except OSError:
                    holder = "?"
                log(f"another fault-test run holds {LOCK_PATH} ({holder}); waiting")
                said = True
            if time.monotonic() > deadline:
                os.close(fd)
                raise NodeError(f"{LOCK_PATH} still held after {LOCK_WAIT:.0f}s by another "
                                "fault-test run on this machine")
            time.sleep(1)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()} build {BUILD_DIR}\n".encode(), 0)
    _module_lock = fd


def release_machine_lock():
    global _module_lock
    if _module_lock is not None:
        fcntl.flock(_module_lock, fcntl.LOCK_UN)
        os.close(_module_lock)
        _module_lock = None


def start_module_node():
    """setUpModule: takes the machine-wide lock, then starts the private node (fresh data)
    once for the module."""
    global _module_node
    if not os.path.isfile(PROXY_BIN) or not os.access(PROXY_BIN, os.X_OK):
        raise unittest.SkipTest(f"proxy executable {PROXY_BIN} is missing; build it first")
    acquire_machine_lock()
    node = Node()
    try:
        seconds = node.start(fresh=True)
    except BaseException:
        release_machine_lock()
        raise
    log(f"private node {NODE_NAME} (RabbitMQ {RABBITMQ_VERSION}) ready on "
        f"127.0.0.1:{BROKER_PORT} after {seconds:.1f}s (started by this module: "
        f"{node.started_by_us}); the tests declare {QUEUE_TYPE} queues")
    _module_node = node
    return node


def stop_module_node():
    """tearDownModule: stops the node if this module started it (never another node), then
    releases the machine-wide lock."""
    global _module_node
    node, _module_node = _module_node, None
    try:
        if node is None:
            return
        try:
            os.kill(node.beam_pid(), signal.SIGCONT)  # a failed stall test must not leave it
        except (OSError, NodeError):                  # stopped
            pass
        if node.started_by_us and not node.running_elsewhere():
            node.stop()
        else:
            log(f"leaving {NODE_NAME} running: this module did not start it")
    finally:
        release_machine_lock()


# ---------------------------------------------------------------- the proxy

def policy_yaml(queue, max_redeliveries=3, requeue="immediate", backoff=None, rate=None,
                dead_letter=None, identity=None):
    lines = [f"queue: {json.dumps(queue)}", f"max_redeliveries: {max_redeliveries}",
             f"requeue: {requeue}"]
    if POLICY_QUEUE_TYPE:
        lines.append(f"queue_type: {POLICY_QUEUE_TYPE}")
    if identity:
        lines.append("identity: [" + ", ".join(identity) + "]")
    for key, value in (("backoff", backoff), ("rate", rate), ("dead_letter", dead_letter)):
        if value:
            lines.append(f"{key}: {{" + ", ".join(f"{k}: {v}" for k, v in value.items()) + "}")
    return "\n".join(lines) + "\n"


# No per-message throttling and no outage detection: the tests count exact outcomes.
NO_RATE_LIMITS = {"window": "10s", "per_message": 1000, "outage_ratio": 1.0,
                  "min_messages": 1000000}


class FaultProxy(proxy_process.Proxy):
    """A nackguard process on a fixed port with a generated config and policies.

    kill9() and restart() reuse the same port, config and policies directory, so that
    clients reconnect to the same address; each start appends to the same log."""

    def __init__(self, name, policies=None, upstream_port=BROKER_PORT, handshake="10s",
                 log_level="info", threads=2, extra_config=""):
        super().__init__(upstream_port, name=name, threads=threads, policies=policies,
                         extra_config=extra_config)
        self.handshake = handshake
        self.log_level = log_level
        self.keep_dir = KEEP_TMP
        self.starts = 0
        self.prepare()
        self.log_path = os.path.join(self.dir, "proxy.log")

    def tmp_root(self):
        return tmp_root()

    def config_text(self):
        return ("# Generated by tests/faults/faults_support.py\n"
                f"listen:   {{address: 127.0.0.1, port: {self.port}}}\n"
                f"upstream: {{host: 127.0.0.1, port: {self.upstream_port}, "
                "connect_timeout: 3s}\n"
                f"threads: {self.threads}\n"
                f"policies_dir: {self.policies_dir}\n"
                f"metrics:  {{address: 127.0.0.1, port: {self.metrics_port}}}\n"
                f"log:      {{level: {self.log_level}, format: text}}\n"
                f"timeouts: {{handshake: {self.handshake}}}\n"
                "shutdown: {grace: 1s}\n" + self.extra_config)

    def write_policy(self, file_name, text):
        """Replaces the file in one rename, as a reload must never read half of it."""
        path = self.policy_path(file_name)
        with open(path + ".tmp", "w") as f:
            f.write(text)
        os.replace(path + ".tmp", path)
        return path

    def start(self):
        log_file = open(self.log_path, "ab")
        try:
            self.process = subprocess.Popen([PROXY_BIN, "--config", self.config_path],
                                            stdin=subprocess.DEVNULL, stdout=log_file,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            log_file.close()
        self.starts += 1
        proxy_process._live_proxies.add(self)
        # The listening socket of a killed predecessor may linger for a moment.
        if not wait_for_port(self.port, 15, alive=self.alive):
            code = self.process.poll()
            self.keep_dir = True
            self.stop()
            raise RuntimeError(f"{self.name} did not start (exit code {code}); log:\n"
                               f"{self.log_text()}")
        return self

    @property
    def pid(self):
        return self.process.pid if self.process else None

    def kill9(self):
        self.process.kill()
        self.process.wait(10)

    def sighup(self):
        self.process.send_signal(signal.SIGHUP)

    def restart(self):
        if self.alive():
            self.stop()
        return self.start()

    def rss_kb(self):
        return rss_kb(self.pid)

    def fds(self):
        return fd_count(self.pid)

    def metrics(self):
        """{'name{labels}': value} scraped from /metrics ({} if it does not answer)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics",
                                        timeout=3) as r:
                text = r.read().decode()
        except OSError:
            return {}
        out = {}
        for line in text.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            key, _, value = line.rpartition(" ")
            try:
                out[key] = float(value)
            except ValueError:
                pass
        return out

    def metric_sum(self, prefix):
        return sum(v for k, v in self.metrics().items()
                   if k == prefix or k.startswith(prefix + "{"))

    def cleanup(self):
        self.stop()  # the directory goes in FaultTest.run, once the test's outcome is known

    def log_text(self, max_lines=60):
        return super().log_text(max_lines)




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
    conn = connect(port)
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


# ---------------------------------------------------------------- accounting

class Ledger:
    """Who published what, what the broker confirmed, and what consumers processed.

    A consumer records a message as consumed *before* it acks it (process, then ack): a
    consumer killed between the two leaves the message unacked, and it comes back (a
    duplicate, never a loss)."""

    def __init__(self, name):
        self.name = name
        self.lock = threading.Lock()
        self.published = []            # ids in publish order
        self.confirmed = set()
        self.nacked = set()            # broker nack or unroutable: the publisher knows
        self.in_doubt = set()          # publish whose confirm never came (connection lost)
        self.consumed = collections.Counter()   # acks per id
        self.returns = collections.Counter()    # nacks(requeue) per id by consumers
        self.final = None              # filled by account()

    def publish(self, msg_id):
        with self.lock:
            self.published.append(msg_id)

    def confirm(self, msg_id):
        with self.lock:
            self.confirmed.add(msg_id)
            self.in_doubt.discard(msg_id)

    def nack(self, msg_id):
        with self.lock:
            self.nacked.add(msg_id)

    def doubt(self, msg_id):
        with self.lock:
            if msg_id not in self.confirmed:
                self.in_doubt.add(msg_id)

    def consume(self, msg_id):
        with self.lock:
            self.consumed[msg_id] += 1

    def returned(self, msg_id):
        with self.lock:
            self.returns[msg_id] += 1

    def unconsumed_confirmed(self):
        with self.lock:
            return len(self.confirmed - set(self.consumed))

    def account(self, dlq=None, delayed=None, queued=None):
        """The final account, given Counters of ids found in the DLQ, the delay queues and
        still in the source queue(s) when the test ended."""
        dlq = dlq or collections.Counter()
        delayed = delayed or collections.Counter()
        queued = queued or collections.Counter()
        with self.lock:
            everywhere = collections.Counter()
            for c in (self.consumed, dlq, delayed, queued):
                everywhere.update(c)
            confirmed = set(self.confirmed)
            lost = sorted(confirmed - set(everywhere))
            duplicated = sum(n - 1 for n in everywhere.values() if n > 1)
            unknown = sorted(set(everywhere) - set(self.published))
            self.final = {
                "published": len(self.published),
                "confirmed": len(confirmed),
                "in_doubt": len(self.in_doubt),
                "in_doubt_found": len(self.in_doubt & set(everywhere)),
                "nacked_by_broker": len(self.nacked),
                "consumed": len(set(self.consumed)),
                "consumer_acks": sum(self.consumed.values()),
                "consumer_returns": sum(self.returns.values()),
                "dead_lettered": sum(dlq.values()),
                "delayed": sum(delayed.values()),
                "queued": sum(queued.values()),
                "duplicated": duplicated,
                "lost": len(lost),
                "lost_ids": lost[:20],
                "unknown_ids": unknown[:20],
            }
            return dict(self.final)

    @staticmethod
    def summary(a):
        return (f"published={a['published']} confirmed={a['confirmed']} "
                f"(in doubt {a['in_doubt']}, {a['in_doubt_found']} of them found) "
                f"consumed={a['consumed']} dead-lettered={a['dead_lettered']} "
                f"delayed={a['delayed']} queued={a['queued']} duplicated={a['duplicated']} "
                f"lost={a['lost']}")


def drain_ids(queue, port=BROKER_PORT, batch=100):
    """Takes every ready message off `queue` (pipelined basic.get with no-ack, directly, by
    the raw client: pika cannot decode every header a hostile test leaves); a Counter of
    their ids."""
    found = collections.Counter()
    client = rawamqp.Client(port, timeout=30)
    try:
        client.handshake()
        client.open_channel(1)
        try:
            client.declare(1, queue, passive=True)
        except rawamqp.ConnectionClosedByPeer as exc:
            if "404" in str(exc) or "NOT_FOUND" in str(exc):
                return found
            raise
        empty = False
        while not empty:
            client.send(b"".join(rawamqp.basic_get(1, queue, no_ack=True)
                                 for _ in range(batch)))
            answers = 0
            deadline = time.monotonic() + 30
            while answers < batch and time.monotonic() < deadline:
                client.pump(0.05)
                for d in client.deliveries:
                    answers += 1
                    if d is None:
                        empty = True
                    else:
                        found[d.id] += 1
                client.deliveries.clear()
            if answers < batch:
                raise RuntimeError(f"draining {queue}: only {answers} of {batch} basic.get "
                                   "answered within 30 s")
    finally:
        client.close()
    return found


def delay_queue_names(node, queue):
    return sorted(n for n in node.queues(f"nackguard.delay.{queue}."))


def final_count(node, queue, extra_queues=()):
    """Drains the delay queues of `queue`, then its DLQ, then the queue itself (in that
    order: a delayed message that expires meanwhile moves into the queue, where it is
    still counted). Returns (dlq, delayed, queued) Counters."""
    delayed = collections.Counter()
    for name in delay_queue_names(node, queue):
        delayed.update(drain_ids(name))
    dlq = drain_ids(f"{queue}.dlq")
    queued = drain_ids(queue)
    for name in extra_queues:
        queued.update(drain_ids(name))
    return dlq, delayed, queued


# ---------------------------------------------------------------- traffic

class ClientEvents:
    """Connection events of a client thread: (monotonic, kind, detail)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.events = []

    def add(self, kind, detail=""):
        with self.lock:
            self.events.append((time.monotonic(), kind, detail))

    def since(self, t0, kind=None):
        with self.lock:
            return [e for e in self.events if e[0] >= t0 and (kind is None or e[1] == kind)]


def describe_error(exc):
    code = getattr(exc, "reply_code", None)
    text = getattr(exc, "reply_text", None)
    if code is not None:
        return f"{type(exc).__name__}({code}, {text})"
    return f"{type(exc).__name__}({exc})"


class ClientThread(threading.Thread):
    """A client loop on its own thread, ended by stop_event."""

    def __init__(self, name):
        super().__init__(daemon=True, name=name)
        self.stop_event = threading.Event()

    def stop(self, timeout=20):
        """Asks the loop to end; whether it did within `timeout` seconds."""
        self.stop_event.set()
        self.join(timeout)
        return not self.is_alive()


class Publisher(ClientThread):
    """Publishes persistent messages with confirms at about `rate` a second, reconnecting
    after any connection loss. Ids are "<prefix>-<n>" with n counting from 1."""

    def __init__(self, port, queue, ledger, prefix, rate=150.0, size=256, heartbeat=None,
                 limit=None, name="publisher"):
        super().__init__(name)
        self.port = port
        self.queue = queue
        self.ledger = ledger
        self.prefix = prefix
        self.rate = rate
        self.size = size
        self.heartbeat = heartbeat
        self.limit = limit
        self.events = ClientEvents()
        self.busy_since = None   # monotonic start of the blocking call in progress
        self.longest_call = 0.0
        self.n = 0
        self.connects = 0

    def _call(self, fn, *args, **kwargs):
        self.busy_since = time.monotonic()
        try:
            return fn(*args, **kwargs)
        finally:
            self.longest_call = max(self.longest_call, time.monotonic() - self.busy_since)
            self.busy_since = None

    def run(self):
        conn = None
        while not self.stop_event.is_set():
            if self.limit is not None and self.n >= self.limit:
                break
            try:
                overrides = {} if self.heartbeat is None else {"heartbeat": self.heartbeat}
                conn = self._call(connect, self.port, **overrides)
                ch = self._call(conn.channel)
                self._call(ch.confirm_delivery)
                self.connects += 1
                self.events.add("connected")
                next_at = time.monotonic()
                while not self.stop_event.is_set():
                    if self.limit is not None and self.n >= self.limit:
                        break
                    self.n += 1
                    msg_id = f"{self.prefix}-{self.n:06d}"
                    self.ledger.publish(msg_id)
                    try:
                        self._call(ch.basic_publish, "", self.queue,
                                   body_for(msg_id, self.size),
                                   pika.BasicProperties(message_id=msg_id, delivery_mode=2),
                                   mandatory=True)
                        self.ledger.confirm(msg_id)
                    except (pika.exceptions.UnroutableError, pika.exceptions.NackError):
                        self.ledger.nack(msg_id)
                    except BaseException:
                        self.ledger.doubt(msg_id)
                        raise
                    next_at += 1.0 / self.rate
                    delay = next_at - time.monotonic()
                    if delay > 0:
                        conn.sleep(delay)
                    else:
                        next_at = time.monotonic()
            except CONNECTION_ERRORS as exc:
                self.events.add("error", describe_error(exc))
                close_quietly(conn, 1.0)
                conn = None
                self.stop_event.wait(0.3)
        close_quietly(conn)
        self.events.add("stopped")



def preload(queue, count, ledger, prefix, size=256, persistent=True, port=BROKER_PORT,
            window=500, first=1):
    """Publishes `count` messages fast (raw client, pipelined confirms, at most `window`
    unconfirmed), directly to the broker unless `port` says otherwise. Ids are
    "<prefix>-<n>" for n from `first`."""
    client = rawamqp.Client(port, timeout=30)
    try:
        client.handshake()
        client.open_channel(1)
        client.confirm_select(1)
        seq_to_id = {}
        n = first
        end = first + count
        while n < end or client.outstanding:
            while n < end and len(client.outstanding) < window:
                msg_id = f"{prefix}-{n:06d}"
                ledger.publish(msg_id)
                seq = client.publish(1, queue, body_for(msg_id, size), message_id=msg_id,
                                     persistent=persistent)
                seq_to_id[seq] = msg_id
                n += 1
            client.pump(0.05)
            for seq in list(client.confirmed):
                msg_id = seq_to_id.pop(seq, None)
                if msg_id is not None:
                    ledger.confirm(msg_id)
            for seq in list(client.nacked):
                msg_id = seq_to_id.pop(seq, None)
                if msg_id is not None:
                    ledger.nack(msg_id)
            client.confirmed.clear()
            client.nacked.clear()
    finally:
        client.close()


class ScriptedBroker:
    """A minimal AMQP 0-9-1 server (asyncio, in its own thread) for connection-count tests
    that a real node cannot take: RabbitMQ's VM here has 1024 file descriptors, so ~830
    connections at once is its ceiling. It plays the server side of the handshake, opens
    and closes channels, answers confirm.select, and confirms every publish after
    recording its id in `received`. Nothing else."""

    def __init__(self):
        import asyncio
        self.asyncio = asyncio
        self.loop = asyncio.new_event_loop()
        self.received = collections.Counter()
        self.connections = 0
        self.open_now = 0
        self.peak_open = 0
        self.errors = []
        self.port = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="scripted-broker")

    def start(self):
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("scripted broker did not start")
        return self

    def _run(self):
        asyncio = self.asyncio
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(
            asyncio.start_server(self._serve, "127.0.0.1", 0, backlog=4096))
        self.server = server
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self.loop.run_forever()
        server.close()
        self.loop.run_until_complete(server.wait_closed())

    def stop(self):
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)

    async def _serve(self, reader, writer):
        r = rawamqp
        self.connections += 1
        self.open_now += 1
        self.peak_open = max(self.peak_open, self.open_now)
        conn = r.AsyncConn(reader, writer)
        try:
            header = await reader.readexactly(8)
            if header != r.PROTOCOL_HEADER:
                return
            start = (struct.pack(">BB", 0, 9) + r.table({"product": "scripted broker",
                                                          "capabilities": {
                                                              "publisher_confirms": True}})
                     + r.longstr("PLAIN") + r.longstr("en_US"))
            await conn.send(r.method_frame(0, r.CONNECTION_START, start))
            pending = {}   # channel -> [seq, id, expected size, got]
            seqs = {}
            while True:
                f = await conn.read_frame()
                m = f.method
                if m == r.CONNECTION_START_OK:
                    await conn.send(r.method_frame(0, r.CONNECTION_TUNE,
                                                   struct.pack(">HIH", 2047, 131072, 0)))
                elif m == r.CONNECTION_OPEN:
                    await conn.send(r.method_frame(0, r.CONNECTION_OPEN_OK, r.shortstr("")))
                elif m == r.CHANNEL_OPEN:
                    await conn.send(r.method_frame(f.channel, r.CHANNEL_OPEN_OK,
                                                   r.longstr("")))
                elif m == r.CONFIRM_SELECT:
                    seqs[f.channel] = 0
                    await conn.send(r.method_frame(f.channel, r.CONFIRM_SELECT_OK))
                elif m == r.BASIC_PUBLISH:
                    pending[f.channel] = None  # its content header comes next
                elif f.type == r.FRAME_HEADER and f.channel in pending:
                    size = struct.unpack_from(">Q", f.payload, 4)[0]
                    if size == 0:
                        del pending[f.channel]
                        await self._published(conn, f.channel, b"", seqs)
                    else:
                        pending[f.channel] = (size, bytearray())
                elif f.type == r.FRAME_BODY and pending.get(f.channel) is not None:
                    size, body = pending[f.channel]
                    body += f.payload
                    if len(body) >= size:
                        del pending[f.channel]
                        await self._published(conn, f.channel, body, seqs)
                elif m == r.CHANNEL_CLOSE:
                    await conn.send(r.method_frame(f.channel, r.CHANNEL_CLOSE_OK))
                elif m == r.CONNECTION_CLOSE:
                    await conn.send(r.connection_close_ok())
                    return
                elif m == r.CONNECTION_CLOSE_OK:
                    return
        except (r.PeerClosed, ConnectionError, self.asyncio.IncompleteReadError):
            pass
        except Exception as exc:  # a bug in this script: keep it for the test to show
            self.errors.append(repr(exc))
        finally:
            self.open_now -= 1
            writer.close()

    async def _published(self, conn, channel, body, seqs):
        self.received[rawamqp.message_id_of(body)] += 1
        if channel in seqs:
            seqs[channel] += 1
            await conn.send(rawamqp.basic_ack(channel, seqs[channel]))


def standard_decide(poison_every=25, flaky_every=7):
    """Poison messages (n % poison_every == 0) are always nacked with requeue; flaky ones
    (n % flaky_every == 0) are nacked on their first delivery only (not redelivered and no
    x-nackguard-returns header yet); everything else is acked."""

    def decide(msg_id, redelivered, headers):
        n = number_of(msg_id)
        if poison_every and n > 0 and n % poison_every == 0:
            return "nack"
        if flaky_every and n > 0 and n % flaky_every == 0:
            first = not redelivered and "x-nackguard-returns" not in (headers or {})
            return "nack" if first else "ack"
        return "ack"

    return decide


class Consumer(ClientThread):
    """Consumes `queue` through `port` with pika, reconnecting after any connection loss.

    decide(id, redelivered, headers) -> "ack" | "nack" (requeue) | "reject" (requeue).
    Records consumed before acking (process, then ack)."""

    def __init__(self, port, queue, ledger, decide=None, prefetch=20, work=0.0,
                 heartbeat=None, name="consumer"):
        super().__init__(name)
        self.port = port
        self.queue = queue
        self.ledger = ledger
        self.decide = decide or standard_decide()
        self.prefetch = prefetch
        self.work = work
        self.heartbeat = heartbeat
        self.events = ClientEvents()
        self.deliveries = 0
        self.last_delivery = time.monotonic()
        self.connects = 0
        self.busy_since = None

    def run(self):
        conn = None
        while not self.stop_event.is_set():
            try:
                overrides = {} if self.heartbeat is None else {"heartbeat": self.heartbeat}
                self.busy_since = time.monotonic()
                conn = connect(self.port, **overrides)
                ch = conn.channel()
                ch.basic_qos(prefetch_count=self.prefetch)
                self.busy_since = None
                self.connects += 1
                self.events.add("connected")
                for method, props, body in ch.consume(self.queue, inactivity_timeout=0.2):
                    if self.stop_event.is_set():
                        break
                    if method is None:
                        continue
                    self.deliveries += 1
                    self.last_delivery = time.monotonic()
                    msg_id = id_of(props, body)
                    if self.work:
                        time.sleep(self.work)
                    action = self.decide(msg_id, method.redelivered, props.headers)
                    if action == "ack":
                        self.ledger.consume(msg_id)
                        ch.basic_ack(method.delivery_tag)
                    elif action == "reject":
                        self.ledger.returned(msg_id)
                        ch.basic_reject(method.delivery_tag, requeue=True)
                    else:
                        self.ledger.returned(msg_id)
                        ch.basic_nack(method.delivery_tag, requeue=True)
                if self.stop_event.is_set():
                    try:
                        ch.cancel()
                    except Exception:
                        pass
            except CONNECTION_ERRORS as exc:
                self.busy_since = None
                self.events.add("error", describe_error(exc))
                close_quietly(conn, 1.0)
                conn = None
                self.stop_event.wait(0.3)
        close_quietly(conn)
        self.events.add("stopped")



def wait_drained(ledger, queue, timeout, dlq_expected=None, quiet=1.5, node=None):
    """Waits until the source queue is empty and every confirmed message is consumed or
    (if dlq_expected says how many poison ids there are) dead-lettered; then `quiet` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            ready = message_count(queue)
            dlq = message_count(f"{queue}.dlq") or 0
        except Exception:
            time.sleep(0.5)
            continue
        missing = ledger.unconsumed_confirmed()
        if ready == 0 and missing <= dlq and (dlq_expected is None or dlq >= dlq_expected):
            time.sleep(quiet)
            if message_count(queue) == 0:
                return True
        time.sleep(0.3)
    return False


# ---------------------------------------------------------------- consumer child process

def consumer_main(argv):
    """python3 faults_support.py consume PORT QUEUE EVENTS PREFETCH HOLD HOLD_MS POISON FLAKY

    A pika consumer that nacks at once (standard_decide) but holds the messages it will ack
    and acks them in batches: when HOLD are held or the oldest has waited HOLD_MS. So at any
    moment it has up to HOLD unacked deliveries. It writes "ack ID" (before each ack) and
    "nack ID" lines to EVENTS with unbuffered os.write: a kill -9 loses no record of a
    processed message."""
    port, queue, events_path = int(argv[0]), argv[1], argv[2]
    prefetch, hold, hold_s = int(argv[3]), int(argv[4]), int(argv[5]) / 1000.0
    decide = standard_decide(int(argv[6]), int(argv[7]))
    fd = os.open(events_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    conn = pika.BlockingConnection(params(port))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=prefetch)
    os.write(fd, b"start\n")
    held = []  # (delivery tag, id, received at)

    def flush():
        for tag, msg_id, _ in held:
            os.write(fd, f"ack {msg_id}\n".encode())
            ch.basic_ack(tag)
        held.clear()

    for method, props, body in ch.consume(queue, inactivity_timeout=0.05):
        if method is not None:
            msg_id = id_of(props, body)
            if decide(msg_id, method.redelivered, props.headers) == "ack":
                held.append((method.delivery_tag, msg_id, time.monotonic()))
            else:
                os.write(fd, f"nack {msg_id}\n".encode())
                ch.basic_nack(method.delivery_tag, requeue=True)
        if held and (len(held) >= hold or time.monotonic() - held[0][2] >= hold_s):
            flush()
    return 0


def read_consumer_events(path, ledger):
    with open(path) as f:
        for line in f:
            kind, _, msg_id = line.strip().partition(" ")
            if kind == "ack":
                ledger.consume(msg_id)
            elif kind == "nack":
                ledger.returned(msg_id)


# ---------------------------------------------------------------- test base

def _resume_node():
    """The watchdog's last act: a node left SIGSTOPped by a hung test would outlive it."""
    if _module_node is not None:
        os.kill(_module_node.beam_pid(), signal.SIGCONT)


def record_result(test_id, data):
    """Appends one JSON line per test result to $BUILD_DIR/faults-results/results.jsonl
    (docs/reliability.md is written from these)."""
    os.makedirs(RESULTS_DIR, exist_ok=True)
    data = dict(data)
    data["test"] = test_id
    data["time"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    with open(os.path.join(RESULTS_DIR, "results.jsonl"), "a") as f:
        f.write(json.dumps(data, sort_keys=True) + "\n")


class FaultTest(unittest.TestCase):
    maxDiff = 4000
    watchdog_timeout = None  # seconds; None: NACKGUARD_FAULTS_TEST_TIMEOUT (300)

    def setUp(self):
        super().setUp()
        self.proxies = []
        self.queues_to_delete = []
        self.t_start = time.monotonic()
        dog = proxy_process.Watchdog(self.id(), self.watchdog_timeout or TEST_TIMEOUT,
                                     before_exit=_resume_node).start()
        self.addCleanup(dog.cancel)
        self.addCleanup(self._delete_queues)
        self.result_data = {}

    def _delete_queues(self):
        if self.queues_to_delete:
            delete_queues(*self.queues_to_delete)

    def start_proxy(self, name=None, **kwargs):
        proxy = FaultProxy(name or self._testMethodName, **kwargs)
        self.proxies.append(proxy)
        self.addCleanup(proxy.cleanup)
        proxy.start()
        return proxy

    def queue(self, tag, declare=True):
        name = unique_queue(tag)
        self.queues_to_delete += [name, f"{name}.dlq"]
        if declare:
            declare_queues(name)
        return name

    def assert_no_loss(self, account, what=""):
        self.assertEqual(account["lost"], 0,
                         f"{what}: lost confirmed messages {account['lost_ids']}: "
                         f"{Ledger.summary(account)}")
        self.assertEqual(account["unknown_ids"], [], f"{what}: messages nobody published")

    def assert_proxy_queues_typed(self, node, queue, what=""):
        """The DLQ and delay queues the proxy declared for `queue` have the queue's own type
        (QUEUE_TYPE): on a quorum queue, a dead letter or a delayed copy must not sit on one
        node's classic queue."""
        types = {name: kind for name, kind in node.queue_types().items()
                 if name == f"{queue}.dlq" or name.startswith(f"nackguard.delay.{queue}.")}
        self.record(proxy_queue_types=types)
        wrong = {name: kind for name, kind in types.items() if kind != QUEUE_TYPE}
        self.assertFalse(wrong, f"{what}: the proxy declared queues of another type for a "
                                f"{QUEUE_TYPE} queue: {types}")

    def assert_only_poison_dead_lettered(self, dlq, poison_every, what=""):
        """No innocent message in the DLQ: only ids n with n % poison_every == 0 (the ones
        the consumer always gives back) may be there (`dlq`: a Counter of ids)."""
        innocent = sorted(i for i in dlq if number_of(i) % poison_every != 0)
        self.record(innocent_dead_lettered=len(innocent))
        self.assertEqual(innocent, [], f"{what}: {len(innocent)} innocent messages "
                                       f"dead-lettered (poison: every {poison_every}th)")

    def record(self, **data):
        self.result_data.update(data)

    def run(self, result=None):
        if result is None:
            return super().run(result)
        outcome, failed = proxy_process.run_showing_logs(
            self, result, super().run, lambda: getattr(self, "proxies", []))
        for proxy in getattr(self, "proxies", []):
            if not getattr(proxy, "shared", False):  # a class-wide proxy outlives the test
                proxy.remove_dir()
        data = dict(getattr(self, "result_data", {}))
        data["seconds"] = round(time.monotonic() - getattr(self, "t_start", time.monotonic()), 1)
        data["outcome"] = "fail" if failed else "pass"
        data["rabbitmq"] = RABBITMQ_VERSION
        data["queue_type"] = QUEUE_TYPE
        try:
            record_result(self.id(), data)
        except OSError:
            pass
        return outcome


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "consume":
        sys.exit(consumer_main(sys.argv[2:]))
    print("usage: faults_support.py consume PORT QUEUE EVENTS PREFETCH HOLD HOLD_MS POISON "
          "FLAKY",
          file=sys.stderr)
    sys.exit(2)
