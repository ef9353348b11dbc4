"""The fault tests' private RabbitMQ node (Node: start/stop, stop_app/start_app, kill -9,
SIGSTOP/SIGCONT, rabbitmqctl), the machine lock around it, and a process's resources
(RSS, file descriptors)."""

import fcntl
import os
import signal
import subprocess
import threading
import time
import unittest


from faults_env import (
    BROKER_PORT, BUILD_DIR, DIST_PORT, EPMD_PORT, LOCK_PATH, LOCK_WAIT, NODE_DIR, NODE_NAME,
    NODE_START_TIMEOUT, PROXY_BIN, QUEUE_TYPE, RABBITMQ_VERSION, log, wait_for_port, wait_until)

import private_node  # noqa: E402  (tests/integration: faults_env put it on sys.path)
import waiting  # noqa: E402


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
        return private_node.node_env(NODE_NAME, BROKER_PORT, DIST_PORT, EPMD_PORT,
                                     version=RABBITMQ_VERSION, fresh=fresh,
                                     start_timeout=NODE_START_TIMEOUT)

    def _script(self, action, fresh=False, timeout=NODE_START_TIMEOUT + 90):
        t0 = time.monotonic()
        result = private_node.node_script(action, self.dir, self._env(fresh), timeout)
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
    said = []

    def locked():
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if not said:
                try:
                    holder = os.pread(fd, 200, 0).decode(errors="replace").strip()
                except OSError:
                    holder = "?"
                log(f"another fault-test run holds {LOCK_PATH} ({holder}); waiting")
                said.append(holder)
            return False

    if not waiting.wait_for(locked, LOCK_WAIT, 1.0):
        os.close(fd)
        raise NodeError(f"{LOCK_PATH} still held after {LOCK_WAIT:.0f}s by another "
                        "fault-test run on this machine")
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


def setUpModule():
    """unittest's module fixture for a fault-test module with a private node of its own:
    `from faults_support import setUpModule, tearDownModule`; its tests reach the node as
    FaultTest.node."""
    start_module_node()


def tearDownModule():
    stop_module_node()
