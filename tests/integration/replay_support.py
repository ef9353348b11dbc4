"""What the replay's integration tests share (test_replay, test_replay_triage,
test_replay_tls, test_cluster_replay): running `nackguard replay`, dead letters as nackguard
writes them, and ReplayCase, the base class with queues and checks.

Environment: NACKGUARD_BIN (the nackguard binary; run as `$NACKGUARD_BIN replay ...`) and
NACKGUARD_TEST_BROKER_PORT (a private RabbitMQ on 127.0.0.1 with guest/guest).
"""

import contextlib
import datetime
import decimal
import os
import pty
import subprocess
import unittest
import uuid

import pika
import pika.compat

import harness

BIN = os.environ.get("NACKGUARD_BIN") or harness.PROXY_BIN
PORT = harness.BROKER_PORT
URL = f"amqp://guest:guest@127.0.0.1:{PORT}/%2F"
RUN_TIMEOUT = 60

REASONS = ["max_redeliveries", "crash_loop"]


def replay_env(env_upstream=None):
    """The environment a replay runs in: this one, NACKGUARD_REPLAY_UPSTREAM as given."""
    env = {k: v for k, v in os.environ.items() if k != "NACKGUARD_REPLAY_UPSTREAM"}
    if env_upstream is not None:
        env["NACKGUARD_REPLAY_UPSTREAM"] = env_upstream
    return env


def start_replay(*args):
    """`$NACKGUARD_BIN replay ARGS` started, its stdout and stderr piped (text)."""
    return subprocess.Popen([BIN, "replay", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=replay_env())


def replay(*args, env_upstream=None, stderr_tty=False):
    """Runs `$NACKGUARD_BIN replay ARGS`; returns (exit code, stdout, stderr)."""
    env = replay_env(env_upstream)
    if not stderr_tty:
        result = subprocess.run([BIN, "replay", *args], capture_output=True, text=True,
                                env=env, timeout=RUN_TIMEOUT)
        return result.returncode, result.stdout, result.stderr
    leader, follower = pty.openpty()
    try:
        process = subprocess.Popen([BIN, "replay", *args], stdout=subprocess.PIPE,
                                   stderr=follower, env=env)
        os.close(follower)
        follower = None
        stdout, _ = process.communicate(timeout=RUN_TIMEOUT)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO once the pty's other side is closed
                break
            if not chunk:
                break
            chunks.append(chunk)
        return process.returncode, stdout.decode(), b"".join(chunks).decode(errors="replace")
    finally:
        os.close(leader)
        if follower is not None:
            os.close(follower)


def dead_letter_headers(i, reason, replays=None):
    """Headers as nackguard puts them on a dead-letter, plus one of the application's."""
    headers = {
        "app-header": f"value-{i}",
        "x-nackguard-reason": reason,
        "x-nackguard-returns": 6,
        "x-nackguard-first-return": datetime.datetime(2024, 5, 1, 12, 0, i),
        "x-nackguard-last-return": datetime.datetime(2024, 5, 1, 12, 5, i),
        "x-nackguard-queue": "orders",
        "x-original-exchange": "",
        "x-original-routingKey": "orders",
        "x-delivery-count": 2,
        "nested": {"list": [1, "two", decimal.Decimal("3.5")], "flag": True},
    }
    if replays is not None:
        headers["x-nackguard-replays"] = replays
    return headers


def properties(i, headers):
    return pika.BasicProperties(
        content_type="application/octet-stream", content_encoding="identity",
        headers=headers, delivery_mode=2, priority=3, correlation_id=f"corr-{i}",
        reply_to="replies", expiration="3600000", message_id=f"m-{i}",
        timestamp=1700000000 + i, type="order.created", user_id="guest", app_id="shop",
        cluster_id="c1")


def body_of(i):
    return bytes([i]) + b"\x00\xff\xce payload " + str(i).encode()


def expected_copy_headers(original):
    headers = {k: v for k, v in original.items()
               if k not in ("x-nackguard-returns", "x-delivery-count")}
    # A long ('l'): pika decodes it as pika.compat.long, an int that repr()s as "1L".
    headers["x-nackguard-replays"] = pika.compat.long(original.get("x-nackguard-replays", 0) + 1)
    return headers


def sorted_by_key(headers):
    """A header table sorted by key (at its top level only, as RabbitMQ 4.x keeps it)."""
    return {key: headers[key] for key in sorted(headers)}


class ReplayCase(unittest.TestCase):
    """Queues, dead letters and checks for the replay's tests (here, test_replay_triage and
    test_replay_tls). `broker_port`: the node's plain AMQP port the test itself uses."""

    broker_port = PORT

    @classmethod
    def setUpClass(cls):
        harness.check_broker()
        if not os.access(BIN, os.X_OK):
            raise AssertionError(f"NACKGUARD_BIN={BIN} is not an executable")

    def setUp(self):
        self.conn = harness.connect(self.broker_port)
        self.addCleanup(harness.close_connection, self.conn)
        self.channel = self.conn.channel()
        self.channel.confirm_delivery()

    @contextlib.contextmanager
    def queues(self, to_arguments=None, dlq_arguments=None, to_type=None):
        """A fresh queue Q (of type `to_type`) and its Q.dlq, both durable and by default of
        the run's queue type (harness.declare_queue); deleted afterwards."""
        name = f"nackguard-it.replay.{uuid.uuid4().hex[:12]}"
        dlq = name + ".dlq"
        harness.declare_queue(self.channel, name, durable=True, arguments=to_arguments,
                              queue_type=to_type)
        harness.declare_queue(self.channel, dlq, durable=True, arguments=dlq_arguments)
        try:
            yield name, dlq
        finally:
            for queue in (name, dlq):
                try:
                    harness.delete_queue(queue, self.broker_port)
                except Exception as exc:
                    print(f"warning: could not delete {queue}: {exc!r}")

    def dead_letter(self, dlq, count, reasons=REASONS, replays=None, start=0):
        """Publishes `count` dead letters into dlq; returns [(properties, body)] in order."""
        sent = []
        for i in range(start, start + count):
            props = properties(i, dead_letter_headers(i, reasons[i % len(reasons)], replays))
            body = body_of(i)
            self.channel.basic_publish("", dlq, body, props)
            sent.append((props, body))
        return sent

    def take_all(self, queue):
        """Gets and acks every message of a queue; returns [(properties, body)]."""
        taken = []
        while True:
            method, props, body = self.channel.basic_get(queue, auto_ack=True)
            if method is None:
                return taken
            taken.append((props, body))

    def count(self, queue):
        return self.channel.queue_declare(queue, passive=True).method.message_count

    def assertExit(self, result, code):
        status, out, err = result
        self.assertEqual(status, code, f"exit {status}\nstdout:\n{out}\nstderr:\n{err}")

    _sorts_headers = {}

    def broker_sorts_headers(self):
        """True when the broker keeps a message's headers sorted by name (RabbitMQ 4.0 does,
        at the table's top level, for the original and its copy alike), not in the order
        they were published."""
        if self.broker_port not in self._sorts_headers:
            probe = f"nackguard-it.replay.order.{uuid.uuid4().hex[:12]}"
            self.channel.queue_declare(probe, exclusive=True)
            self.channel.basic_publish("", probe, b"", pika.BasicProperties(
                headers={"b": 1, "a": 1}))
            _method, props, _body = self.channel.basic_get(probe, auto_ack=True)
            self.channel.queue_delete(probe)
            self._sorts_headers[self.broker_port] = list(props.headers) == ["a", "b"]
        return self._sorts_headers[self.broker_port]

    def assertCopiesIntact(self, sent, copies):
        """One copy per original, in order: the same body and properties, and headers
        rewritten exactly as a first replay does (in the broker's order: see
        broker_sorts_headers)."""
        self.assertEqual(len(copies), len(sent))
        sort = sorted_by_key if self.broker_sorts_headers() else (lambda value: value)
        for (original, body), (copy, copy_body) in zip(sent, copies):
            self.assertEqual(copy_body, body)
            self.assertEqual(copy.headers["x-nackguard-replays"], 1)
            self.assertNotIn("x-nackguard-returns", copy.headers)
            self.assertNotIn("x-delivery-count", copy.headers)
            expected = pika.BasicProperties(**{
                name: getattr(original, name) for name in harness.PROPERTY_NAMES})
            expected.headers = sort(expected_copy_headers(original.headers))
            self.assertEqual(harness.describe_properties(copy),
                             harness.describe_properties(expected))

    def assertOneLine(self, err, *parts):
        lines = err.strip().splitlines()
        self.assertEqual(len(lines), 1, err)
        self.assertTrue(lines[0].startswith("nackguard replay: "), err)
        for part in parts:
            self.assertIn(part, lines[0])
