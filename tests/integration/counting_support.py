"""Helpers for test_counting.py (issue 37: one exact count per message).

What is here (on top of harness.py and redelivery_support.py, which it uses and does not
change):
  run_crash_consumers()  consumer child processes (main() below), one after another, each
                    dying with os._exit on any of several poison messages, until one idles out:
                    raw AMQP clients (amqp_wire, wire_reader) that record every delivery
                    the proxy sent, those behind the poison they died on included
  TurnTaker         a pika consumer behind one sidecar that takes turns: it consumes until it
                    holds the poison (acking other messages), cancels, then nacks it, so that
                    a poison alternates deterministically between consumers
  ManagementNode    a private 3.10 node with the management plugin, and a monitoring user
  ManagementGuard   a GuardProxy whose upstream has a management section
  set_delivery_limit_policy()  a RabbitMQ policy `delivery-limit` on exactly some queues

`python3 counting_support.py crash-consumer PORT QUEUE POISON[,POISON...] EVENTS PREFETCH IDLE`
is the child process: redelivery_support's crash-consumer, for more than one poison and
without a client library that reads deliveries it never shows.
"""

import os
import re
import socket
import struct
import subprocess
import sys
import time
import uuid

import pika

import amqp_wire as aw
import harness
from management_config import with_management
import private_node
import redelivery_support as rs
import wire_reader

# ---------------------------------------------------------------- crashing consumers

def _describe(deliver, properties, body):
    h = properties.headers or {}
    return (f"{body.decode(errors='replace')} {int(deliver.redelivered)} "
            f"returns={h.get('x-nackguard-returns')} copy={h.get('x-nackguard-copy-id')} "
            f"suspect={h.get('x-nackguard-suspect')} dc={h.get('x-delivery-count')}")


def _next_delivery(next_frame):
    """Reads frames with next_frame() (None: no more) up to a basic.deliver and its content;
    returns (deliver, properties, body), or None when the frames end first."""
    frame = None
    while frame is None or frame.method != aw.BASIC_DELIVER:
        frame = next_frame()
        if frame is None:
            return None
    deliver = pika.spec.Basic.Deliver()
    deliver.decode(frame.args)
    content = []
    while not content or content[0].type != aw.FRAME_HEADER:
        content = [next_frame()]
        if content[0] is None:
            return None
    size = struct.unpack_from(">Q", content[0].payload, 4)[0]
    properties = pika.spec.BasicProperties()
    properties.decode(content[0].payload, 12)
    body = b""
    while len(body) < size:
        frame = next_frame()
        if frame is None:
            return None
        if frame.type == aw.FRAME_BODY:
            body += frame.payload
    return deliver, properties, body


def crash_consumer(port, queue, poisons, events_path, prefetch, idle_seconds):
    """A raw AMQP consumer (no client library buffering deliveries out of sight): acks every
    message but the poisons. On a poison it dies as a crashed process does, without a close
    frame, after reading every delivery the proxy sent before it saw the end of the
    connection: it shuts its side down, reads to the end, and exits with os._exit. Exits 0
    (with connection.close) after `idle_seconds` without a delivery. Appends "deliver LABEL
    REDELIVERED returns=.. copy=.. suspect=.. dc=..", "held ..." (the same, for each delivery
    in its hands when it died), "ack LABEL", "crash LABEL", "idle-exit" lines to events_path."""
    fd = os.open(events_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def event(text):
        os.write(fd, (text + "\n").encode())

    sock = socket.create_connection((harness.BROKER_HOST, port), timeout=10)
    reader, _ = wire_reader.client_handshake(sock)
    sock.sendall(aw.channel_open(1))
    reader.read_method(aw.CHANNEL_OPEN_OK)
    sock.sendall(aw.basic_qos(1, prefetch))
    reader.read_method(aw.BASIC_QOS_OK)
    sock.sendall(aw.basic_consume(1, queue))
    reader.read_method(aw.BASIC_CONSUME_OK)
    idle_until = [time.monotonic() + idle_seconds]

    def live_frame():
        remaining = idle_until[0] - time.monotonic()
        try:
            return reader.read_frame(timeout=max(remaining, 0.001))
        except socket.timeout:
            return None

    while True:
        delivery = _next_delivery(live_frame)
        if delivery is None:
            break
        deliver, properties, body = delivery
        label = body.decode(errors="replace")
        idle_until[0] = time.monotonic() + idle_seconds
        event(f"deliver {_describe(*delivery)}")
        if label in poisons:
            sock.shutdown(socket.SHUT_WR)
            try:
                rest = reader.read_until_eof(timeout=30)
            except (socket.timeout, OSError) as exc:
                event(f"note read to the end failed: {exc!r}")
                rest = b""
            frames = iter(aw.split_frames(bytearray(rest))[0])
            while (held := _next_delivery(lambda: next(frames, None))) is not None:
                event(f"held {_describe(*held)}")
            event(f"crash {label}")
            os._exit(rs.CRASH_EXIT_CODE)
        sock.sendall(aw.basic_ack(1, deliver.delivery_tag))
        event(f"ack {label}")
    # Deliveries that come while it closes are in its hands at the close.
    sock.sendall(aw.connection_close())
    frames = []
    while not frames or frames[-1].method != aw.CONNECTION_CLOSE_OK:
        frames.append(reader.read_frame(timeout=30))
    frames = iter(frames)
    while (held := _next_delivery(lambda: next(frames, None))) is not None:
        event(f"held {_describe(*held)}")
    sock.close()
    event("idle-exit")
    return 0


def run_crash_consumers(port, queue, poisons, events_path, prefetch=10, idle=1.5,
                        max_runs=14):
    """Runs consumer processes one after another until one idles out (or `max_runs`).
    Returns (exit codes, events as split lines, the last child's stderr)."""
    codes, stderr = [], ""
    for _ in range(max_runs):
        child = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "crash-consumer", str(port), queue,
             ",".join(poisons), events_path, str(prefetch), str(idle)],
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
        codes.append(child.returncode)
        stderr = child.stderr
        if child.returncode != rs.CRASH_EXIT_CODE:
            break
    with open(events_path) as f:
        events = [line.split() for line in f.read().splitlines()]
    return codes, events, stderr


# ---------------------------------------------------------------- turns

class TurnTaker:
    """A consumer behind `port` (prefetch 1) that consumes only during its turn."""

    def __init__(self, port, queue, poison, name):
        self.queue, self.poison, self.name = queue, poison, name
        self.conn = harness.connect(port)
        self.ch = self.conn.channel()
        self.ch.basic_qos(prefetch_count=1)
        self.poison_deliveries = []  # (method, properties)
        self.acked = []

    def turn(self, stop, timeout=15.0):
        """Consumes until the poison comes (acking anything else) or stop() holds; then
        cancels and, holding the poison, nacks it with requeue (its prefetch of 1 is full
        meanwhile: nothing more comes). Returns whether the poison came."""
        held = []

        def on_delivery(channel, method, properties, body):
            if body.decode(errors="replace") == self.poison:
                held.append(method)
                self.poison_deliveries.append((method, properties))
            else:
                channel.basic_ack(method.delivery_tag)
                self.acked.append(body.decode(errors="replace"))

        tag = self.ch.basic_consume(self.queue, on_delivery)
        deadline = time.monotonic() + timeout
        next_check = 0.0
        while not held:
            self.conn.process_data_events(time_limit=0.05)
            if held:
                break
            now = time.monotonic()
            if now >= next_check:
                next_check = now + 0.2
                if stop():
                    break
            if now > deadline:
                raise AssertionError(f"{self.name}: no poison and no stop within {timeout} s "
                                     f"(poison delivered {len(self.poison_deliveries)} times)")
        self.ch.basic_cancel(tag)
        if held:
            self.ch.basic_nack(held[0].delivery_tag, requeue=True)
        return bool(held)

    def close(self):
        return harness.close_connection(self.conn)


def take_turns(takers, stop, max_turns=12):
    """Takers take turns in order until a turn ends without the poison (stop() held)."""
    for turn in range(max_turns):
        if not takers[turn % len(takers)].turn(stop):
            return turn
    raise AssertionError(f"still going after {max_turns} turns")


# ---------------------------------------------------------------- RabbitMQ policies

def set_delivery_limit_policy(ctl, queues, limit, prefix="nackguard-it-dl"):
    """A RabbitMQ policy `delivery-limit: limit` on exactly `queues`, through `ctl` (a function
    taking rabbitmqctl's arguments). Returns its name, for clear_policy."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    pattern = "^(" + "|".join(re.escape(q) for q in queues) + ")$"
    ctl("set_policy", "-p", "/", "--apply-to", "queues", "--priority", "50", name, pattern,
        f'{{"delivery-limit":{limit}}}')
    return name


# ---------------------------------------------------------------- the management API

class ManagementNode:
    """A private 3.10 node with the management plugin (tests/rabbitmq-node.sh), on ports of
    its own: AMQP 31372, distribution 31373 (its CLI tools the 10 above), epmd 31369,
    management 31390. A user with the monitoring tag and a permission entry on "/" may read
    the API. Statistics every second, as in test_management_limits."""

    AMQP_PORT, DIST_PORT, EPMD_PORT, MGMT_PORT = 31372, 31373, 31369, 31390
    MONITOR = "nackguard-monitor"
    LOCK = "/tmp/nackguard-test-counting-mgmt-node.lock"

    def __init__(self):
        self.dir = os.path.join(harness.BUILD_DIR, "rabbitmq-counting-mgmt")
        self.env = private_node.node_env(
            "nackguard-counting-mgmt@localhost", self.AMQP_PORT, self.DIST_PORT,
            self.EPMD_PORT, version="3.10", fresh=True, plugins="rabbitmq_management",
            conf_extra=f"management.tcp.port = {self.MGMT_PORT}\nmanagement.tcp.ip = 127.0.0.1"
                       "\ncollect_statistics_interval = 1000",
            advanced_config="[{rabbit, [{quorum_tick_interval, 1000}]}].")
        self.password = "monitor-" + uuid.uuid4().hex[:8]
        self.url = f"http://127.0.0.1:{self.MGMT_PORT}"
        self._lock = None

    def script(self, action, timeout=180):
        return private_node.node_script(action, self.dir, self.env, timeout)

    def ctl(self, *args):
        done = subprocess.run([os.path.join(self.dir, "rabbitmqctl"), *args], timeout=60,
                              capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            raise AssertionError(f"rabbitmqctl {' '.join(args)}: {done.stdout}{done.stderr}")
        return done.stdout

    def start(self):
        os.makedirs(self.dir, exist_ok=True)
        self._lock = harness.lock_file(self.LOCK, "another run of test_counting holds its node")
        if self.script("status").returncode == 0:
            self.script("stop")  # left over from an interrupted run
        started = self.script("start", 300)
        if started.returncode != 0 or not harness.wait_for_port(self.MGMT_PORT, 60):
            self.stop()
            raise AssertionError(f"the management node did not start:\n{started.stdout}"
                                 f"{started.stderr}")
        self.ctl("add_user", self.MONITOR, self.password)
        self.ctl("set_user_tags", self.MONITOR, "monitoring")
        self.ctl("set_permissions", "-p", "/", self.MONITOR, "", "", "")

    def stop(self):
        try:
            stopped = self.script("stop")
            if stopped.returncode != 0:
                print(f"warning: stopping {self.dir}: {stopped.stderr}", file=sys.stderr)
        finally:
            if self._lock is not None:
                self._lock.close()


class ManagementGuard(rs.GuardProxy):
    """A GuardProxy in front of `node` whose upstream has a management section (refresh 1 s)."""

    def __init__(self, policies, node, name="mgmt-guard"):
        super().__init__(policies, name=name, upstream_port=node.AMQP_PORT)
        self.node = node

    def config_text(self):
        return with_management(self, super().config_text(), self.node.url,
                               self.node.MONITOR, self.node.password)


def main(argv):
    if len(argv) == 7 and argv[0] == "crash-consumer":
        return crash_consumer(int(argv[1]), argv[2], set(argv[3].split(",")), argv[4],
                              int(argv[5]), float(argv[6]))
    print("usage: counting_support.py crash-consumer PORT QUEUE POISON[,POISON...] EVENTS "
          "PREFETCH IDLE", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
