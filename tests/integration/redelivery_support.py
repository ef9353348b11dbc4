"""Helpers for the redelivery-guard integration tests (test_redelivery*.py).

What is here (on top of harness.py, which it uses and does not change):
  GuardProxy        one nackguard process with a generated config AND a policies dir
                    holding the given policy files (harness.Proxy always writes an empty
                    policies dir); same duck type as harness.Proxy for the log printing
  policy_yaml()     the text of one policy file
  RedeliveryTest    unittest base: per-test proxies, queue names deleted afterwards
                    (with their .dlq and delay queues), a direct broker connection,
                    declare_source() for the scenario's queue of the run's queue type
  Recorder          an in-process pika consumer that records every delivery and settles
                    it as a decide() callback says
  poll_until()      runs several consumers' I/O until a condition holds
  main()            `python3 redelivery_support.py crash-consumer ...`: a consumer child
                    process that dies with os._exit when it gets the poison message
"""

import collections
import os
import sys
import time
import uuid

import pika
from pika.exceptions import ChannelClosedByBroker

import harness
import proxy_process

# Headers the proxy adds to a copy it republishes (to a delay queue, a dead-letter queue or the
# tail of its own queue).
PROXY_HEADERS = ("x-nackguard-returns", "x-nackguard-returns-queue", "x-nackguard-copy-id",
                 "x-nackguard-suspect", "x-nackguard-exact", "x-nackguard-deliveries", "x-nackguard-first-return",
                 "x-nackguard-last-return", "x-nackguard-reason", "x-nackguard-queue",
                 "x-nackguard-consumer", "x-original-exchange", "x-original-routingKey")
# Headers RabbitMQ adds when it dead-letters a message (the delay queue's TTL expiry).
BROKER_DLX_HEADERS = ("x-death", "x-first-death-queue", "x-first-death-reason",
                      "x-first-death-exchange", "x-last-death-queue", "x-last-death-reason",
                      "x-last-death-exchange")
# Headers RabbitMQ adds to a delivery: a quorum queue's counts of earlier deliveries, from the
# first redelivery on (x-acquired-count from 4.3 on). The proxy's copies carry neither.
BROKER_DELIVERY_HEADERS = ("x-delivery-count", "x-acquired-count")

CRASH_EXIT_CODE = 17


# ---------------------------------------------------------------- policies and proxies

_yaml_str = proxy_process.yaml_str
policy_yaml = proxy_process.policy_yaml


# Rate settings for tests that count exact deliveries under `requeue: immediate`: no
# per-message throttling and no outage detection.
NO_RATE_LIMITS = {"window": "10s", "per_message": 1000, "outage_ratio": 0.5,
                  "min_messages": 100000}


class GuardProxy(harness.Proxy):
    """A nackguard process with the given policy files (harness.Proxy). Its directory
    (config, policies, log) stays after cleanup(), until remove_dir() once the test's
    outcome is known (RedeliveryTest.run)."""

    def __init__(self, policies, name="guard-proxy", upstream_port=harness.BROKER_PORT,
                 upstream_host=harness.BROKER_HOST, extra_config=""):
        super().__init__(upstream_port, upstream_host=upstream_host, name=name,
                         policies=policies, extra_config=extra_config)

    def cleanup(self):
        self.stop()

    def log_text(self, max_lines=80):
        return super().log_text(max_lines)


# ---------------------------------------------------------------- broker access (direct)

class Broker:
    """A direct guest connection to the test broker for setup and inspection."""

    def __init__(self):
        self.conn = harness.connect(harness.BROKER_PORT)
        self.ch = self.conn.channel()

    def close(self):
        harness.close_connection(self.conn)

    def _channel(self):
        if not self.conn.is_open:
            self.conn = harness.connect(harness.BROKER_PORT)
            self.ch = self.conn.channel()
        elif not self.ch.is_open:
            self.ch = self.conn.channel()
        return self.ch

    def declare(self, queue, durable=False, arguments=None):
        """Declares a queue of the run's queue type (harness.queue_kwargs): with
        NACKGUARD_TEST_QUEUE_TYPE=quorum it is durable and x-queue-type quorum."""
        harness.declare_queue(self._channel(), queue, durable, arguments)

    def publish(self, queue, messages, exchange=""):
        """messages: (body, BasicProperties) pairs; published with confirms, in order."""
        ch = self.conn.channel()
        try:
            ch.confirm_delivery()
            for body, props in messages:
                ch.basic_publish(exchange, queue, body, props, mandatory=True)
        finally:
            ch.close()

    def message_count(self, queue):
        """The queue's ready-message count, or None if the queue does not exist."""
        try:
            return self._channel().queue_declare(queue, passive=True).method.message_count
        except ChannelClosedByBroker as exc:
            if exc.reply_code == 404:
                return None
            raise

    def exists(self, queue):
        return self.message_count(queue) is not None

    def consumer_count(self, queue):
        try:
            return self._channel().queue_declare(queue, passive=True).method.consumer_count
        except ChannelClosedByBroker as exc:
            if exc.reply_code == 404:
                return None
            raise

    def get_all(self, queue, limit=100000):
        """Every ready message of the queue as (method, props, body), left in the queue
        (fetched unacked on a separate connection, then requeued by closing it).
        [] if the queue does not exist."""
        if self.message_count(queue) is None:
            return []
        conn = harness.connect(harness.BROKER_PORT)
        try:
            ch = conn.channel()
            out = []
            while len(out) < limit:
                method, props, body = ch.basic_get(queue, auto_ack=False)
                if method is None:
                    break
                out.append((method, props, body))
            return out
        finally:
            harness.close_connection(conn)


# ---------------------------------------------------------------- consumers

Delivery = collections.namedtuple("Delivery", "label tag redelivered props body time consumer "
                                              "exchange routing_key")


class Recorder:
    """An in-process pika consumer through `port` that records every delivery.

    decide(delivery) returns "ack", "nack", "reject" (both with requeue=True) or None
    (leave it unsettled; settle later with ack()/nack()). The label of a delivery is
    its body decoded as text (the tests give every message a distinct body).
    """

    def __init__(self, port, queue, decide, prefetch=10, name="consumer", credentials=None,
                 client_properties=None):
        self.name = name
        self.decide = decide
        overrides = {}
        if credentials is not None:
            overrides["credentials"] = credentials
        if client_properties is not None:
            overrides["client_properties"] = client_properties
        self.conn = harness.connect(port, **overrides)
        self.ch = self.conn.channel()
        self.ch.basic_qos(prefetch_count=prefetch)
        self.deliveries = []
        self.acks = collections.Counter()
        self.returns = collections.Counter()
        self.pending = []  # deliveries decide() left unsettled
        self.ch.basic_consume(queue, self._on_delivery)

    def _on_delivery(self, ch, method, props, body):
        d = Delivery(body.decode(errors="replace"), method.delivery_tag, method.redelivered,
                     props, body, time.monotonic(), self.name, method.exchange,
                     method.routing_key)
        self.deliveries.append(d)
        action = self.decide(d)
        if action == "ack":
            self.ack(d)
        elif action == "nack":
            ch.basic_nack(d.tag, multiple=False, requeue=True)
            self.returns[d.label] += 1
        elif action == "reject":
            ch.basic_reject(d.tag, requeue=True)
            self.returns[d.label] += 1
        elif action is None:
            self.pending.append(d)
        else:
            raise ValueError(action)

    def ack(self, d):
        self.ch.basic_ack(d.tag)
        self.acks[d.label] += 1

    def delivered(self, label=None):
        if label is None:
            return len(self.deliveries)
        return sum(1 for d in self.deliveries if d.label == label)

    def poll(self, seconds):
        self.conn.process_data_events(time_limit=seconds)

    def close(self):
        return harness.close_connection(self.conn)


def poll_until(consumers, done, timeout, quiet=0.0, step=0.05, check_every=0.2):
    """Runs the consumers' I/O until done() holds (checked at most every `check_every`
    seconds), then `quiet` seconds more so that an extra delivery would be seen.
    Returns whether done() held before the timeout."""
    deadline = time.monotonic() + timeout
    next_check = 0.0
    ok = False
    while time.monotonic() < deadline:
        for c in consumers:
            c.poll(step / max(1, len(consumers)))
        now = time.monotonic()
        if now >= next_check:
            next_check = now + check_every
            if done():
                ok = True
                break
    end = time.monotonic() + quiet
    while time.monotonic() < end:
        for c in consumers:
            c.poll(step / max(1, len(consumers)))
    return ok


# ---------------------------------------------------------------- messages

def props(**kwargs):
    return pika.BasicProperties(**kwargs)


def strip_headers(headers, names=PROXY_HEADERS + BROKER_DLX_HEADERS + BROKER_DELIVERY_HEADERS):
    """The headers without those the proxy, the broker's dead-lettering or the broker's
    delivery adds."""
    return {k: v for k, v in (headers or {}).items() if k not in names}


def broker_keeps_header_order(redelivered):
    """Whether the test broker delivers a message's header table in the order it was
    published, for the run's queue type. Measured: RabbitMQ 3.10.8 keeps it on a classic
    queue, and on a quorum queue's first delivery; a quorum queue's redelivery, to which
    3.10 adds x-delivery-count, has its top-level keys sorted; 4.0.5 sorts them on every
    delivery from either queue type (a direct consumer sees the same)."""
    if harness.broker_version() >= (4,):
        return False
    return harness.QUEUE_TYPE == "classic" or not redelivered


def as_received(p):
    """The properties as pika decodes them after a trip over the wire (pika decodes some
    values to other types than it was given, e.g. 2**40 to its `long` int subclass)."""
    out = pika.spec.BasicProperties()
    out.decode(b"".join(p.encode()))
    return out


def properties_except_headers(p):
    return tuple(item for item in harness.describe_properties(p) if item[0] != "headers")


# ---------------------------------------------------------------- test base

class RedeliveryTest(harness.IntegrationTest):
    """Each test starts its own GuardProxy processes with its own policies."""

    wants_shared_proxy = False

    def setUp(self):
        super().setUp()
        self.require_proxy()  # every test here is about the proxy
        self.broker = Broker()
        self.addCleanup(self.broker.close)

    def queue_name(self, tag, delay_ttls_ms=()):
        """A unique queue name; the queue, its .dlq and its delay queues for the given
        TTLs are deleted after the test."""
        name = f"nackguard-it.redeliv-{tag}.{uuid.uuid4().hex[:10]}"
        self.cleanup_queues(name, f"{name}.dlq",
                            *(f"nackguard.delay.{name}.{ttl}ms" for ttl in delay_ttls_ms))
        return name

    def cleanup_queues(self, *names):
        def delete():
            for n in names:
                try:
                    harness.delete_queue(n)
                except Exception as exc:
                    print(f"warning: could not delete queue {n}: {exc!r}", file=sys.stderr)
        self.addCleanup(delete)

    def start_guard(self, policies, name=None, extra_config=""):
        """Starts a GuardProxy with policies {file name: YAML text}; stopped at cleanup."""
        proxy = GuardProxy(policies, name=name or f"{self._testMethodName}-proxy",
                           extra_config=extra_config)
        self._test_proxies.append(proxy)
        self.addCleanup(proxy.cleanup)
        proxy.start()
        return proxy

    def declare_source(self, proxies, queue, arguments=None):
        """Declares the scenario's queue, of the run's queue type. A classic queue is
        declared directly on the broker, as before the queue-type switch; a quorum queue is
        declared through each of `proxies` (one proxy or a list), as each application
        instance would, so that every proxy learns its type from a queue.declare (and
        declares the DLQ and delay queues to match)."""
        if harness.QUEUE_TYPE == "classic":
            self.broker.declare(queue, arguments=arguments)
            return
        for proxy in proxies if isinstance(proxies, (list, tuple)) else [proxies]:
            conn = harness.connect(proxy.port)
            try:
                harness.declare_queue(conn.channel(), queue, arguments=arguments)
            finally:
                harness.close_connection(conn)

    def consumer(self, proxy, queue, decide, **kwargs):
        c = Recorder(proxy.port, queue, decide, **kwargs)
        self.addCleanup(c.close)
        return c

    def assert_proxy_alive(self, proxy):
        self.assertTrue(proxy.alive(), f"{proxy.name} exited with code "
                                       f"{proxy.process.returncode}")


# ---------------------------------------------------------------- child consumer process

def crash_consumer(port, queue, poison, events_path, prefetch, idle_seconds):
    """Consumes through `port`; acks every message except `poison`, on which it dies with
    os._exit(CRASH_EXIT_CODE) (no close, no nack: a crash). Exits 0 after `idle_seconds`
    without a delivery. Appends "deliver LABEL REDELIVERED", "ack LABEL", "crash LABEL"
    lines to events_path."""
    fd = os.open(events_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def event(text):
        os.write(fd, (text + "\n").encode())

    conn = pika.BlockingConnection(harness.connection_params(port))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=prefetch)
    last = [time.monotonic()]

    def on_delivery(channel, method, properties, body):
        label = body.decode(errors="replace")
        last[0] = time.monotonic()
        event(f"deliver {label} {int(method.redelivered)}")
        if label == poison:
            event(f"crash {label}")
            os._exit(CRASH_EXIT_CODE)
        channel.basic_ack(method.delivery_tag)
        event(f"ack {label}")

    ch.basic_consume(queue, on_delivery)
    event("start")
    while time.monotonic() - last[0] < idle_seconds:
        conn.process_data_events(time_limit=0.1)
    conn.close()
    event("idle-exit")
    os.close(fd)
    return 0


def main(argv):
    if len(argv) == 7 and argv[0] == "crash-consumer":
        return crash_consumer(int(argv[1]), argv[2], argv[3], argv[4], int(argv[5]),
                              float(argv[6]))
    print("usage: redelivery_support.py crash-consumer PORT QUEUE POISON EVENTS PREFETCH IDLE",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
