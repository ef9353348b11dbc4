# ctest-variants: quorum rmq40 rmq40.quorum rmq43 rmq43.quorum
"""Every name nackguard builds fits AMQP's 255 bytes (issue 12, item 1), end to end.

A name over 255 bytes keeps its fixed ending (".dlq", ".<ttl>ms", the routing-key
template's text after its last {queue}); its beginning is cut to make room for "~" and 16
hex digits of XXH3-64 of the whole name (proxy/retry/names.hpp; fit_name() below computes
the same with libxxhash through ctypes). Policy: max_redeliveries 3, no rate limits; a pika
consumer through the proxy nacks (requeue=True) the poison every time and acks the rest.

(a) six queues named with 250 to 255 bytes, the default dead_letter "{queue}.dlq": each
    poison is delivered exactly 4 times, then sits in its DLQ, named "<queue>.dlq" up to a
    251-byte queue and fitted from 252 bytes on; the good messages are acked once; no
    fallback line; the consumers' channels and connections stay open.
    Before the fix, the DLQ's queue.declare did not encode and was never sent, but counted
    as sent: the copy waited for a declare-ok that never came, fell back after 30 s, and
    the poison went on looping.
(b) a named exchange and a template, "{queue}.dead.{queue}.parked", that expands to 412
    bytes for a 200-byte queue: the poison reaches the queue bound with the fitted key
    after exactly 4 deliveries, and the consumer's connection stays open. Before the fix
    the copy's basic.publish did not encode but its content header and body were sent:
    the broker closed the client's whole connection with 505 UNEXPECTED_FRAME.
(c) requeue: delayed on a 255-byte queue: the copies go through the fitted delay queue
    ("nackguard.delay.<queue>.100ms" is 281 bytes), the poison is delivered exactly 4 times,
    then dead-lettered to its fitted DLQ.
"""

import ctypes
import unittest
import uuid

import harness
import redelivery_scenarios as scenarios
import redelivery_support as rs
from redelivery_support import NO_RATE_LIMITS, props

MAX_NAME = 255
HASH_BYTES = 17  # "~" and 16 hex digits
MAX_REDELIVERIES = 3

_xxhash = ctypes.CDLL("libxxhash.so.0")
_xxhash.XXH3_64bits.restype = ctypes.c_uint64
_xxhash.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]


def fit_name(name, ending=0):
    """The rule of proxy/retry/names.hpp, written again: `name` (str) as nackguard fits it."""
    raw = name.encode()
    if len(raw) <= MAX_NAME:
        return name
    if ending > MAX_NAME - HASH_BYTES:
        ending = 0
    prefix = MAX_NAME - HASH_BYTES - ending
    while prefix > 0 and (raw[prefix] & 0xC0) == 0x80:
        prefix -= 1
    digest = b"~%016x" % _xxhash.XXH3_64bits(raw, len(raw))
    return (raw[:prefix] + digest + raw[len(raw) - ending:]).decode()


class LongNamesTest(scenarios.RedeliveryScenarioTest):

    def long_queue(self, tag, length):
        """A unique queue name of exactly `length` bytes (deleted after the test)."""
        head = f"nackguard-it.long-{tag}-{uuid.uuid4().hex[:8]}-{length}."
        name = head + "x" * (length - len(head))
        self.assertEqual(len(name.encode()), length)
        return name

    def policy(self, pattern, **kwargs):
        return {"long.yaml": rs.policy_yaml(pattern, max_redeliveries=MAX_REDELIVERIES,
                                            rate=NO_RATE_LIMITS, **kwargs)}

    def publish_three(self, queue, poison):
        """good-1, the poison, good-2; the body is the label."""
        self.broker.publish(queue, [
            (b"good-1", props(message_id=f"{queue[:40]}-g1")),
            (poison.encode(), props(message_id=f"{queue[:40]}-p", delivery_mode=2)),
            (b"good-2", props(message_id=f"{queue[:40]}-g2")),
        ])

    def poison_consumer(self, proxy, queue, poison):
        return self.consumer(proxy, queue, lambda d: "nack" if d.label == poison else "ack",
                             prefetch=10, name=queue[-12:])

    def loop_poison_into(self, proxy, queue, target):
        """Publishes the three messages to `queue` and consumes them through `proxy`, nacking
        the poison, until the poison is in `target` (checked: exactly its loop); the consumer."""
        self.declare_source(proxy, queue)
        self.publish_three(queue, "poison")
        consumer = self.poison_consumer(proxy, queue, "poison")
        ok = rs.poll_until([consumer], lambda: self.broker.message_count(target) == 1,
                           timeout=60, quiet=1.0)
        self.assertTrue(ok, f"the poison is not in {target}: {consumer.delivered('poison')} "
                            f"deliveries, connection open {consumer.conn.is_open}")
        self.assert_poison_looped_exactly(consumer, "poison")
        return consumer

    def assert_poison_looped_exactly(self, consumer, poison):
        self.assertEqual(consumer.delivered(poison), MAX_REDELIVERIES + 1,
                         f"poison deliveries (max_redeliveries {MAX_REDELIVERIES})")
        self.assertEqual((consumer.acks["good-1"], consumer.acks["good-2"]), (1, 1))
        self.assertEqual(consumer.delivered(), MAX_REDELIVERIES + 3)
        self.assertTrue(consumer.ch.is_open and consumer.conn.is_open,
                        "the consumer's channel or connection was closed")

    def test_a_queue_names_of_250_to_255_bytes(self):
        tag = uuid.uuid4().hex[:6]
        queues = [self.long_queue(tag, n) for n in range(250, 256)]
        dlqs = [fit_name(q + ".dlq", len(".dlq")) for q in queues]
        for q, dlq in zip(queues, dlqs):
            self.cleanup_queues(q, dlq)
            self.assertLessEqual(len(dlq.encode()), MAX_NAME)
        self.assertEqual([len(d) for d in dlqs], [254, 255, 255, 255, 255, 255])
        self.assertEqual(dlqs[:2], [queues[0] + ".dlq", queues[1] + ".dlq"])
        self.assertEqual(len(set(dlqs)), 6)

        proxy = self.start_guard(self.policy(f"nackguard-it.long-{tag}-*"))
        consumers = []
        for q in queues:
            self.declare_source(proxy, q)
            self.publish_three(q, "poison")
            consumers.append(self.poison_consumer(proxy, q, "poison"))

        def done():
            return all(self.broker.message_count(d) == 1 for d in dlqs)

        ok = rs.poll_until(consumers, done, timeout=60, quiet=1.0)
        self.assertTrue(ok, "not every DLQ holds its poison: " + ", ".join(
            f"{len(q)} bytes: {c.delivered('poison')} deliveries, DLQ "
            f"{self.broker.message_count(d)}" for q, c, d in zip(queues, consumers, dlqs)))
        for q, c, dlq in zip(queues, consumers, dlqs):
            with self.subTest(queue_bytes=len(q)):
                self.assert_poison_looped_exactly(c, "poison")
                copies = self.broker.get_all(dlq)
                self.assertEqual([body for _, _, body in copies], [b"poison"])
                method, p, _ = copies[0]
                self.assertEqual((method.exchange, method.routing_key), ("", dlq))
                self.assertEqual(p.headers.get("x-nackguard-queue"), q)
                self.assertEqual(p.headers.get("x-nackguard-reason"), "max_redeliveries")
                self.assertEqual(self.broker.message_count(q), 0)
        for c in consumers:
            self.assertTrue(c.close(), "a consumer's connection did not close cleanly")
        self.assertEqual(proxy.log_lines("fallback:"), [])
        self.assert_proxy_alive(proxy)

    def test_b_template_past_255_bytes_to_a_named_exchange(self):
        queue = self.long_queue(uuid.uuid4().hex[:6], 200)
        template = "{queue}.dead.{queue}.parked"
        key = fit_name(f"{queue}.dead.{queue}.parked", len(".parked"))
        self.assertEqual(len(key), MAX_NAME)
        self.assertEqual(key[-24], "~")
        exchange = f"nackguard-it.long-dead-{uuid.uuid4().hex[:8]}"
        parked = f"nackguard-it.long-parked-{uuid.uuid4().hex[:8]}"
        self.cleanup_queues(queue, parked)
        ch = self.broker._channel()
        ch.exchange_declare(exchange, "direct", auto_delete=False)
        self.addCleanup(self.delete_exchange, exchange)
        self.broker.declare(parked)
        self.broker._channel().queue_bind(parked, exchange, routing_key=key)

        proxy = self.start_guard(self.policy(
            queue, dead_letter={"exchange": rs._yaml_str(exchange),
                                "routing_key": rs._yaml_str(template)}))
        consumer = self.loop_poison_into(proxy, queue, parked)
        copies = self.broker.get_all(parked)
        self.assertEqual([body for _, _, body in copies], [b"poison"])
        self.assertEqual((copies[0][0].exchange, copies[0][0].routing_key), (exchange, key))
        self.assertTrue(consumer.close(), "the consumer's connection did not close cleanly")
        self.assertEqual(proxy.log_lines("fallback:"), [])
        self.assert_proxy_alive(proxy)

    def test_c_delayed_retries_through_a_fitted_delay_queue(self):
        queue = self.long_queue(uuid.uuid4().hex[:6], 255)
        delay_queue = fit_name(f"nackguard.delay.{queue}.100ms", len(".100ms"))
        dlq = fit_name(queue + ".dlq", len(".dlq"))
        self.assertEqual((len(delay_queue), len(dlq)), (MAX_NAME, MAX_NAME))
        self.cleanup_queues(queue, dlq, delay_queue)
        proxy = self.start_guard(self.policy(
            queue, requeue="delayed",
            backoff={"initial": "100ms", "multiplier": 1, "max": "100ms", "jitter": "none"}))
        consumer = self.loop_poison_into(proxy, queue, dlq)
        self.assertTrue(self.broker.exists(delay_queue), "the fitted delay queue is missing")
        self.assertEqual(self.broker.message_count(delay_queue), 0)
        self.assertTrue(consumer.close(), "the consumer's connection did not close cleanly")
        self.assertEqual(proxy.log_lines("fallback:"), [])
        self.assert_proxy_alive(proxy)


if __name__ == "__main__":
    unittest.main()
