# ctest-variants: rmq40 rmq43
"""A consumer that hangs on the poison, against a private RabbitMQ node whose
consumer_timeout is 2 s (issue 12, item 9).

RabbitMQ closes such a consumer's channel with 406 "delivery acknowledgement on channel N
timed out" and requeues every delivery of the channel. nackguard counts that close as a
return of the timed-out delivery alone (the channel's oldest unsettled one by broker tag), and
dead-letters it with reason consumer_timeout past max_redeliveries. The broker checks the
timeout on each channel tick, every channel_tick_interval (60 s by default); the node here
ticks every 500 ms (advanced.config), so each hang lasts 2 to about 2.5 s.

The node is this module's own (tests/rabbitmq-node.sh, data under
build/rabbitmq-consumer-timeout[-4.0|-4.3]): 3.10 nackguard-ctimeout@localhost on ports
30672/30673/30369, 4.0 nackguard-ctimeout40@localhost on 30772/30773/30469, 4.3
nackguard-ctimeout43@localhost on 30872/30873/30569 (the CLI tools use the 10 ports above the
distribution port), so the variants run side by side with other
tests. The ports are below Linux's ephemeral range (32768-60999): there, the local end of any
program's outgoing connection may hold the port, for 60 s after it closed (TIME-WAIT), and the
node's listener fails with eaddrinuse (seen with 58672, twice in a row). Started in
setUpClass and stopped in tearDownClass, under a lock in /tmp that keeps a second run (from
another build directory) off the same node. Both queue types run against the one node;
NACKGUARD_TEST_QUEUE_TYPE does not apply.

(a) For a classic and for a quorum queue: 5 innocent messages, the poison, 5 more;
    max_redeliveries 1; a consumer (prefetch 10, one thread, like most) that acks every
    innocent message and blocks on the poison until the broker closes its channel, then
    opens a new one. The innocent messages before the poison are acked before it arrives
    (so the broker's oldest unacked delivery, the one it times out, is the poison); the 5
    after it reach the client behind it, unacked, and are requeued with it. At its second
    delivery nackguard hands the poison, now a suspect, out alone (docs/choosing-a-policy.md,
    "Crash loops"): the 5 wait behind it and go back with it again. The poison is
    delivered exactly 2 times, then sits in <queue>.dlq with x-nackguard-reason
    consumer_timeout and x-nackguard-returns 2; each innocent message is acked exactly
    once; the 5 after the poison count nothing: from a classic queue they are acked as
    redeliveries; a quorum queue's redelivery carries x-delivery-count, and under the
    assumed delivery limit (2) nackguard republishes it before the consumer sees it
    (docs/choosing-a-policy.md, "Quorum queues"), so they are acked from copies carrying
    x-nackguard-returns 0, and the poison's second delivery is such a copy too
    (x-nackguard-returns 1, x-nackguard-suspect); nackguard counted exactly 2 returns on
    the queue (the poison's; without the fix the 5 count one each: 7) and one dead letter,
    reason consumer_timeout, logged once; the queue ends empty. Every wait is bounded (a
    hang 20 s, the scenario 60 s).

RabbitMQ 4.3 (rmq43) times consumers out differently, measured on 4.3.6 with this node's
consumer_timeout of 2 s: a classic queue's consumer is never timed out, and a quorum queue
times its consumer out itself, with a basic.cancel of that consumer (the channel stays open)
that requeues every delivery the consumer held. So on 4.3:

(b) classic: a consumer holds the poison unacked (5 innocent messages acked before it), and
    the same connection's consumer of a quorum "witness" queue holds its one message: once
    the witness consumer got the broker's basic.cancel (the node's consumer timeout works,
    more than 2 s after both deliveries), the classic consumer is still there with the poison
    in its hands: no channel close, nothing requeued, nackguard counted no return; then the
    poison's ack goes through and the queue ends empty.
(c) quorum: the consumer acks the 5 innocent messages before the poison and holds the poison
    and the 5 after it (as one blocked on the poison would); the broker cancels it and
    requeues the 6. The timed-out delivery is the poison: nackguard must count one return of
    it alone, as it does for 3.x's and 4.0's channel close.
"""

import os
import sys
import time
import unittest
import uuid

from pika.exceptions import AMQPChannelError

import harness
import hung_consumer
import private_node
import redelivery_support as rs
from holding_client import HoldingClient
from redelivery_support import NO_RATE_LIMITS, props

VERSION = private_node.VERSION
# Each version's node: (name suffix, directory suffix, AMQP, distribution and epmd ports).
SUFFIX, DIR_SUFFIX, NODE_PORT, DIST_PORT, EPMD_PORT = {
    "3.10": ("", "", 30672, 30673, 30369),
    "4.0": ("40", "-4.0", 30772, 30773, 30469),
    "4.3": ("43", "-4.3", 30872, 30873, 30569)}[VERSION]
NODE_DIR = os.path.join(harness.BUILD_DIR, "rabbitmq-consumer-timeout" + DIR_SUFFIX)
CONSUMER_TIMEOUT_MS = 2000
START_TIMEOUT = private_node.start_timeout(VERSION, 120)
NODE_ENV = private_node.node_env(
    f"nackguard-ctimeout{SUFFIX}@localhost", NODE_PORT, DIST_PORT, EPMD_PORT, version=VERSION,
    fresh=True, start_timeout=START_TIMEOUT,
    conf_extra=f"consumer_timeout = {CONSUMER_TIMEOUT_MS}",
    # RabbitMQ checks consumer_timeout on each channel tick (rabbit_channel), once a minute
    # by default; rabbitmq.conf has no key for the interval.
    advanced_config="[{rabbit, [{channel_tick_interval, 500}]}].")
NODE_LOCK = f"/tmp/nackguard-test-ctimeout{SUFFIX}-node.lock"
POISON = "poison"
INNOCENT = [f"innocent-{i}" for i in range(10)]
HANG_LIMIT = 20.0  # s a hang may last before the test gives up (expected: 2 to 2.5 s)
SCENARIO_LIMIT = 60.0  # s for the whole scenario (expected: about 5 s)


def node(action, timeout=60):
    return private_node.node_script(action, NODE_DIR, NODE_ENV, timeout)


class ConsumerTimeoutTest(rs.RedeliveryTest):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        os.makedirs(NODE_DIR, exist_ok=True)
        cls._lock = harness.lock_file(NODE_LOCK, "another run of test_consumer_timeout holds "
                                      "its node")
        # With the lock held, a node that answers is left over from an interrupted run
        # (perhaps with other settings): stop it, start one with these.
        if node("status").returncode == 0:
            print(f"note: stopping {NODE_ENV['NACKGUARD_TEST_NODE']} left over from an "
                  "earlier run", file=sys.stderr)
            node("stop", 180)
        started = node("start", START_TIMEOUT + 120)
        if started.returncode != 0:
            cls._lock.close()
            raise RuntimeError(f"{private_node.NODE_SCRIPT} start {NODE_DIR} failed:\n{started.stdout}"
                               f"{started.stderr}")

    @classmethod
    def tearDownClass(cls):
        try:
            stopped = node("stop", 180)
            if stopped.returncode != 0:
                print(f"warning: {private_node.NODE_SCRIPT} stop {NODE_DIR}: {stopped.stderr}",
                      file=sys.stderr)
        finally:
            cls._lock.close()  # releases the flock
            super().tearDownClass()

    def direct(self):
        conn = harness.connect(NODE_PORT)
        self.addCleanup(harness.close_connection, conn)
        return conn

    def test_a_hung_consumer_dead_letters_only_the_poison_classic(self):
        if VERSION == "4.3":
            self.no_timeout_on_classic_queues_43()
        else:
            self.hung_consumer_scenario("classic")

    def test_a_hung_consumer_dead_letters_only_the_poison_quorum(self):
        if VERSION == "4.3":
            self.quorum_queue_cancels_its_consumer_43()
        else:
            self.hung_consumer_scenario("quorum")

    # ------------------------------------------------------------ RabbitMQ 4.3

    def guard(self, queue, queue_type):
        proxy = rs.GuardProxy(
            {"q.yaml": rs.policy_yaml(queue, max_redeliveries=1, rate=NO_RATE_LIMITS)},
            name=f"consumer-timeout-{queue_type}-proxy", upstream_port=NODE_PORT)
        self._test_proxies.append(proxy)
        self.addCleanup(proxy.cleanup)
        proxy.start()
        return proxy

    def queue_counts(self, queue):
        """(ready, consumers) of the queue, on a direct connection."""
        direct = self.direct()
        method = direct.channel().queue_declare(queue, passive=True).method
        return method.message_count, method.consumer_count

    def no_timeout_on_classic_queues_43(self):
        queue = f"nackguard-it.ctimeout-classic.{uuid.uuid4().hex[:10]}"
        witness = f"nackguard-it.ctimeout-witness.{uuid.uuid4().hex[:10]}"
        self.cleanup_queues(queue, f"{queue}.dlq", witness)
        proxy = self.guard(queue, "classic")
        setup = harness.connect(proxy.port)
        self.addCleanup(harness.close_connection, setup)
        harness.declare_queue(setup.channel(), queue, queue_type="classic")
        harness.declare_queue(setup.channel(), witness, queue_type="quorum")
        publisher = self.direct().channel()
        publisher.confirm_delivery()
        for label in INNOCENT[:5] + [POISON]:
            publisher.basic_publish("", queue, label.encode(), props(message_id=f"mid-{label}"))
        publisher.basic_publish("", witness, b"witness", props(message_id="mid-witness"))
        client = HoldingClient(proxy.port)
        self.addCleanup(client.close)
        client.consume(1, queue, hold=lambda label: label == POISON)
        client.pump(lambda: client.held(1) == [POISON] and client.acked[1] == INNOCENT[:5], 10,
                    "the classic queue's deliveries")
        client.consume(2, witness, hold=lambda label: True)
        client.pump(lambda: client.cancelled.get(2), HANG_LIMIT,
                    "the broker's basic.cancel of the witness quorum queue's consumer")
        # The node's consumer timeout fired (on the quorum queue), and the poison was held
        # longer than that: the classic queue's consumer was not timed out.
        self.assertEqual(client.closed, {}, "a channel was closed")
        self.assertEqual(client.cancelled, {2: 1}, "consumers the broker cancelled")
        self.assertEqual(client.held(1), [POISON])
        self.assertEqual(self.queue_counts(queue), (0, 1), "(ready, consumers) of the queue")
        self.assertEqual(proxy.metrics().value("nackguard_returns_total", queue=queue), 0)
        client.ack(1, POISON)
        client.close_channel(1)
        self.assertEqual(self.queue_counts(queue), (0, 0), "the poison was acked")
        self.assertEqual(proxy.metrics().value("nackguard_returns_total", queue=queue), 0)
        self.assertEqual(proxy.metrics().value("nackguard_deliveries_total", queue=queue), 6)
        self.assertIsNone(self.broker.message_count(f"{queue}.dlq"), "a DLQ was declared")
        self.assert_proxy_alive(proxy)

    def quorum_queue_cancels_its_consumer_43(self):
        queue = f"nackguard-it.ctimeout-quorum.{uuid.uuid4().hex[:10]}"
        self.cleanup_queues(queue, f"{queue}.dlq")
        proxy = self.guard(queue, "quorum")
        setup = harness.connect(proxy.port)
        self.addCleanup(harness.close_connection, setup)
        harness.declare_queue(setup.channel(), queue, queue_type="quorum")
        publisher = self.direct().channel()
        publisher.confirm_delivery()
        for label in INNOCENT[:5] + [POISON] + INNOCENT[5:]:
            publisher.basic_publish("", queue, label.encode(), props(message_id=f"mid-{label}"))
        client = HoldingClient(proxy.port)
        self.addCleanup(client.close)
        # As a consumer blocked on the poison: the poison and what came after it stay unacked.
        blocked = {"on": False}

        def hold(label):
            blocked["on"] = blocked["on"] or label == POISON
            return blocked["on"]

        client.consume(1, queue, hold)
        client.pump(lambda: client.cancelled.get(1), HANG_LIMIT,
                    "the broker's basic.cancel of the quorum queue's consumer")
        self.assertEqual(client.acked[1], INNOCENT[:5])
        self.assertEqual(client.held(1), [POISON] + INNOCENT[5:])
        self.assertEqual(client.closed, {}, "4.3 closed the channel")
        self.assertEqual(self.queue_counts(queue)[0], 6, "ready: the 6 held deliveries requeued")
        # nackguard's count of the timeout: the poison's return, and only it.
        deadline = time.monotonic() + 5
        while (proxy.metrics().value("nackguard_returns_total", queue=queue) != 1
               and time.monotonic() < deadline):
            client.pump(lambda: False, 0.1, None)
        self.assertEqual(proxy.metrics().value("nackguard_returns_total", queue=queue), 1,
                         "returns counted at RabbitMQ 4.3's consumer timeout (a basic.cancel "
                         "that requeues the consumer's deliveries): the timed-out poison's "
                         "alone")

    def hung_consumer_scenario(self, queue_type):
        queue = f"nackguard-it.ctimeout-{queue_type}.{uuid.uuid4().hex[:10]}"
        dlq = f"{queue}.dlq"
        proxy = self.guard(queue, queue_type)
        conn = harness.connect(proxy.port)
        self.addCleanup(harness.close_connection, conn)
        # Through the proxy: it learns the queue's type, and declares the DLQ to match.
        harness.declare_queue(conn.channel(), queue, queue_type=queue_type)
        direct = self.direct()
        publisher = direct.channel()
        publisher.confirm_delivery()
        for label in INNOCENT[:5] + [POISON] + INNOCENT[5:]:
            publisher.basic_publish("", queue, label.encode(), props(message_id=f"mid-{label}"))

        def dead_lettered():
            # A channel of its own: the passive declare of an absent DLQ closes it (404).
            probe = direct.channel()
            try:
                return probe.queue_declare(dlq, passive=True).method.message_count
            except AMQPChannelError:
                return 0
            finally:
                if probe.is_open:
                    probe.close()

        result = hung_consumer.run(conn, queue, POISON, INNOCENT,
                                   done=lambda: dead_lettered() >= 1, limit_s=SCENARIO_LIMIT,
                                   hang_limit_s=HANG_LIMIT)
        events, hangs = result.events, result.hangs
        # What the broker did, for the log (ctest shows it when the test fails).
        print(f"note: RabbitMQ {VERSION}, {queue_type} queue: scenario {result.took:.1f} s, "
              f"hangs {[round(h, 2) for h in hangs]} s, the poison's headers "
              f"{result.poison_headers}", file=sys.stderr)
        # Hangs of more than the timeout plus a few ticks: channel_tick_interval from the
        # node's advanced.config is not in effect (the default ticks once a minute).
        self.assertTrue(hangs and all(h < 10 for h in hangs),
                        f"hangs (s): {hangs}; the broker should close the channel "
                        f"{CONSUMER_TIMEOUT_MS} ms after the poison's delivery, within a "
                        f"tick (500 ms, {NODE_DIR}/advanced.config); events: {events}")
        self.assertEqual(result.deliveries_of(POISON), 2, f"poison deliveries: {events}")
        page = proxy.metrics()
        self.assertEqual(page.value("nackguard_returns_total", queue=queue), 2.0,
                         f"returns counted: only the poison's two timeouts (events: {events})")
        # Each time the poison arrived, every innocent message delivered before it on that
        # channel had been acked: the broker's oldest unacked delivery was the poison's. Those
        # after it were delivered with it, unacked when the broker closed the channel, and
        # requeued: they are what the proxy must not count.
        quorum = queue_type == "quorum"
        result.assert_innocent_acked_once(self, INNOCENT, quorum)
        copies = []
        while True:
            method, p, body = publisher.basic_get(dlq, auto_ack=True)
            if method is None:
                break
            copies.append((body, p.headers or {}))
        self.assertEqual([body for body, _ in copies], [POISON.encode()], "DLQ contents")
        headers = copies[0][1]
        self.assertEqual(headers.get("x-nackguard-reason"), "consumer_timeout", headers)
        self.assertEqual(headers.get("x-nackguard-returns"), 2, headers)
        self.assertEqual({labels.get("reason"): value
                          for labels, value in page.series("nackguard_dead_letters_total")
                          if labels.get("queue") == queue and value},
                         {"consumer_timeout": 1.0}, "dead letters by reason")
        self.assertEqual(publisher.queue_declare(queue, passive=True).method.message_count, 0)
        lines = proxy.log_lines(f"dead-lettered: queue={queue} ")
        self.assertEqual(len(lines), 1, lines)
        self.assertIn("reason=consumer_timeout", lines[0])
        self.assert_proxy_alive(proxy)


if __name__ == "__main__":
    unittest.main()
