"""The shared parts of the redelivery scenarios (test_redelivery.py): the mix of 99 good
messages and a poison, the checks of a dead-letter copy, of the DLQ and of the log, and the
scenario loops that several tests run.

What is here (on top of redelivery_support.py, which it uses and does not change):
  POISON, GOODS      the labels (bodies) of the poison and the 99 good messages
  typed_headers()    a type-exact normal form of a header table, in or out of order
  RedeliveryScenarioTest
                     unittest base (a redelivery_support.RedeliveryTest): immediate_policy(),
                     publish_mix(), dlq_count(), check_dead_letter_copy(),
                     check_dlq_declared_like_source(), check_dead_lettered_log(),
                     run_poison_loop() ((a)-(c)), run_crash_consumers() ((d)),
                     run_multiple_nack() ((g)), delete_exchange()
"""

import datetime
import os
import socket
import subprocess
import sys
import time
import uuid

import pika
from pika.exceptions import ChannelClosedByBroker

import harness
import redelivery_support as rs
from redelivery_support import NO_RATE_LIMITS, props

POISON = "poison"
GOODS = [f"good-{i:02d}" for i in range(99)]
POISON_INDEX = 37  # the poison sits among the good messages, not at either end


def typed_headers(headers, ordered=True):
    """Type-exact normal form of a header table; ordered=False ignores the order of the
    top-level keys (RabbitMQ sorts them when it dead-letters a message, e.g. when a
    delay queue's TTL sends a copy back)."""
    headers = dict(headers or {})
    if not ordered:
        headers = dict(sorted(headers.items()))
    return harness.typed(headers)


def utc_seconds(t):
    """time.time() as the naive UTC datetime pika decodes AMQP timestamps to (whole s)."""
    return datetime.datetime.utcfromtimestamp(int(t))


class RedeliveryScenarioTest(rs.RedeliveryTest):

    # ------------------------------------------------------------ shared scenario parts

    def immediate_policy(self, queue, max_redeliveries=5, **kwargs):
        return {"q.yaml": rs.policy_yaml(queue, max_redeliveries=max_redeliveries,
                                         requeue="immediate", rate=NO_RATE_LIMITS, **kwargs)}

    def publish_mix(self, queue, poison_props, good_props):
        """99 good messages and the poison at POISON_INDEX; body = label."""
        messages = [(label.encode(), good_props(label)) for label in GOODS]
        messages.insert(POISON_INDEX, (POISON.encode(), poison_props))
        self.broker.publish(queue, messages)
        self.assertEqual(self.broker.message_count(queue), 100)

    def dlq_count(self, queue):
        return self.broker.message_count(f"{queue}.dlq") or 0

    def check_dead_letter_copy(self, queue, copy, published_props, published_body, returns,
                               reason, t_start, t_end, header_order=True,
                               last_delivery=None):
        """header_order: the copy's headers are in the order they were published, where the
        broker delivered them so (rs.broker_keeps_header_order: the copy is made from a
        redelivery). last_delivery: the last delivery of the message through the proxy; the
        copy keeps its headers in the order and with the types the broker delivered them."""
        method, p, body = copy
        published_props = rs.as_received(published_props)
        self.assertEqual(body, published_body, "the dead-lettered body changed")
        self.assertEqual((method.exchange, method.routing_key), ("", f"{queue}.dlq"))
        self.assertEqual(rs.properties_except_headers(p),
                         rs.properties_except_headers(published_props),
                         "a property other than headers changed on the dead-letter copy")
        headers = p.headers or {}
        header_order = header_order and rs.broker_keeps_header_order(redelivered=True)
        self.assertEqual(typed_headers(rs.strip_headers(headers), header_order),
                         typed_headers(published_props.headers, header_order),
                         "the original headers are not kept unchanged")
        if last_delivery is not None:
            self.assertEqual(typed_headers(rs.strip_headers(headers)),
                             typed_headers(rs.strip_headers(last_delivery.props.headers)),
                             "the copy's headers differ from those of the last delivery")
        self.assertEqual(headers.get("x-nackguard-reason"), reason)
        self.assertEqual(headers.get("x-nackguard-returns"), returns)
        self.assertIsInstance(headers.get("x-nackguard-returns"), int)
        self.assertEqual(headers.get("x-nackguard-queue"), queue)
        # Every return of these scenarios ended one delivery through the proxy.
        self.assertEqual(headers.get("x-nackguard-deliveries"), returns)
        # The consumers are pika clients without a connection_name, behind a proxy on this host.
        self.assertEqual(headers.get("x-nackguard-consumer"),
                         f"Pika Python Client Library {pika.__version__} on {socket.gethostname()}")
        self.assertEqual(headers.get("x-original-exchange"), "")
        self.assertEqual(headers.get("x-original-routingKey"), queue)
        first = headers.get("x-nackguard-first-return")
        last = headers.get("x-nackguard-last-return")
        self.assertIsInstance(first, datetime.datetime, f"x-nackguard-first-return: {first!r}")
        self.assertIsInstance(last, datetime.datetime, f"x-nackguard-last-return: {last!r}")
        self.assertLessEqual(utc_seconds(t_start), first)
        self.assertLessEqual(first, last)
        self.assertLessEqual(last, utc_seconds(t_end + 1))

    def check_dlq_declared_like_source(self, queue):
        """The proxy declared the DLQ durable and of the source queue's type (classic:
        without arguments; quorum: x-queue-type quorum, and on 4.x x-delivery-limit -1): an
        equivalent declare succeeds, a different one closes the channel with 406
        PRECONDITION_FAILED."""
        arguments = None
        if harness.QUEUE_TYPE == "quorum" and harness.broker_version() >= (4,):
            arguments = {"x-delivery-limit": -1}
        try:
            self.broker.declare(f"{queue}.dlq", durable=True, arguments=arguments)
        except ChannelClosedByBroker as exc:
            self.fail(f"{queue}.dlq is not a durable {harness.QUEUE_TYPE} queue like its "
                      f"source queue: {exc}")

    def check_dead_lettered_log(self, proxy, queue, identity_prefix, returns, reason):
        lines = proxy.log_lines(f"dead-lettered: queue={queue} ")
        self.assertEqual(len(lines), 1, f"dead-lettered lines for {queue}: {lines}")
        self.assertIn(f"identity={identity_prefix}", lines[0])
        self.assertIn(f" returns={returns} reason={reason}", lines[0])

    def run_poison_loop(self, queue, proxy, poison_action, poison_props, identity_prefix):
        """(a)/(b)/(c): acks good, returns the poison every time; max_redeliveries 5."""
        t_start = time.time()
        consumer = self.consumer(
            proxy, queue, lambda d: poison_action if d.label == POISON else "ack", prefetch=10)
        done = rs.poll_until(
            [consumer], lambda: sum(consumer.acks.values()) >= 99 and self.dlq_count(queue) >= 1,
            timeout=60, quiet=1.0)
        t_end = time.time()
        self.assertTrue(done, f"not done in 60 s: {sum(consumer.acks.values())} acks, "
                              f"{consumer.delivered(POISON)} poison deliveries, DLQ "
                              f"{self.dlq_count(queue)}")
        self.assertEqual(consumer.delivered(POISON), 6, "poison deliveries (max_redeliveries 5)")
        self.assertEqual(consumer.returns[POISON], 6)
        for label in GOODS:
            self.assertEqual((consumer.delivered(label), consumer.acks[label]), (1, 1),
                             f"{label}: (deliveries, acks)")
        self.assertEqual(sum(consumer.acks.values()), 99)
        self.assertTrue(consumer.ch.is_open and consumer.conn.is_open)
        self.assertTrue(consumer.close(), "the consumer's connection did not close cleanly")

        dlq = self.broker.get_all(f"{queue}.dlq")
        self.assertEqual([m[2] for m in dlq], [POISON.encode()], "DLQ contents")
        last = [d for d in consumer.deliveries if d.label == POISON][-1]
        self.check_dead_letter_copy(queue, dlq[0], poison_props, POISON.encode(), 6,
                                    "max_redeliveries", t_start, t_end, last_delivery=last)
        self.check_dlq_declared_like_source(queue)
        self.assertEqual(self.broker.message_count(queue), 0, "the queue is not empty")
        self.check_dead_lettered_log(proxy, queue, identity_prefix, 6, "max_redeliveries")
        self.assertEqual(proxy.log_lines(f"fallback: queue={queue}"), [])
        self.assert_proxy_alive(proxy)

    def run_crash_consumers(self, proxy, queue, runs=15, idle_seconds="2.0"):
        """(d): runs crash-consumer child processes (redelivery_support.py) one after the
        other, at most `runs`, until one does not crash (one idles out after `idle_seconds`
        without a delivery); returns their exit codes, the events they wrote and the last
        one's stderr."""
        events_path = os.path.join(proxy.dir, "consumer-events.txt")
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                              "redelivery_support.py")
        exit_codes = []
        for _ in range(runs):
            child = subprocess.run(
                [sys.executable, script, "crash-consumer", str(proxy.port), queue, POISON,
                 events_path, "10", idle_seconds],
                stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
            exit_codes.append(child.returncode)
            if child.returncode != rs.CRASH_EXIT_CODE:
                break
        with open(events_path) as f:
            events = [line.split() for line in f.read().splitlines()]
        return exit_codes, events, child.stderr

    def run_multiple_nack(self, cover_goods):
        queue = self.queue_name("g-all" if cover_goods else "g-poison")
        proxy = self.start_guard(self.immediate_policy(queue))
        self.declare_source(proxy, queue)
        labels = ["good-0", "poison-1", "good-2", "poison-3", "good-4"]
        goods = [l for l in labels if l.startswith("good")]
        poisons = [l for l in labels if l.startswith("poison")]
        self.broker.publish(queue, [(l.encode(), props(message_id=f"mid-{l}-{uuid.uuid4().hex}"))
                                    for l in labels])
        consumer = self.consumer(proxy, queue, lambda d: None, prefetch=10)
        seen = {}  # label -> deliveries so far
        rounds = 0
        last_delivery_count = -1
        quiet_since = time.monotonic()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            consumer.poll(0.05)
            if len(consumer.deliveries) != last_delivery_count:
                last_delivery_count = len(consumer.deliveries)
                quiet_since = time.monotonic()
                continue
            if time.monotonic() - quiet_since < 0.3:
                continue
            if not consumer.pending:
                if sum(consumer.acks.values()) >= len(goods) and self.dlq_count(queue) >= 2:
                    break
                continue
            # One round: settle every pending delivery.
            rounds += 1
            batch, consumer.pending = consumer.pending, []
            nack_upto = None
            for d in batch:
                seen[d.label] = seen.get(d.label, 0) + 1
                if d.label in goods and (not cover_goods or seen[d.label] >= 2):
                    consumer.ack(d)
                else:
                    nack_upto = d.tag if nack_upto is None else max(nack_upto, d.tag)
                    consumer.returns[d.label] += 1
            if nack_upto is not None:
                if not cover_goods:
                    # Only poison deliveries remain unacked below this tag.
                    nack_upto = max(d.tag for d in batch if d.label in poisons)
                consumer.ch.basic_nack(nack_upto, multiple=True, requeue=True)
            quiet_since = time.monotonic()
        consumer.poll(0.5)
        self.assertTrue(consumer.ch.is_open and consumer.conn.is_open,
                        "the consumer's channel or connection was closed")
        self.assertEqual(consumer.pending, [])
        for p in poisons:
            self.assertEqual(consumer.delivered(p), 6, f"{p} deliveries (max_redeliveries 5)")
        for g in goods:
            self.assertEqual(consumer.acks[g], 1, f"{g} acks")
            self.assertEqual(consumer.delivered(g), 2 if cover_goods else 1, f"{g} deliveries")
        self.assertTrue(consumer.close())
        dlq = self.broker.get_all(f"{queue}.dlq")
        self.assertEqual(sorted(m[2].decode() for m in dlq), poisons, "DLQ contents")
        for m in dlq:
            self.assertEqual(m[1].headers.get("x-nackguard-returns"), 6)
            self.assertEqual(m[1].headers.get("x-nackguard-reason"), "max_redeliveries")
        self.assertEqual(self.broker.message_count(queue), 0)
        self.assertEqual(len(proxy.log_lines(f"dead-lettered: queue={queue} ")), 2)
        self.assertEqual(proxy.log_lines(f"fallback: queue={queue}"), [])
        self.assert_proxy_alive(proxy)

    def delete_exchange(self, name):
        conn = harness.connect(harness.BROKER_PORT)
        try:
            conn.channel().exchange_delete(name)
        finally:
            harness.close_connection(conn)
