# ctest-variants: rmq43 rmq43.quorum
"""The proxy is transparent to pika for plain publish and consume.

Proves that through the proxy, exactly as directly against RabbitMQ:
- 10,000 empty messages, 10,000 of 1 KiB and 200 of 1 MiB (bodies that span
  several body frames at frame_max 131072) all arrive, byte-exact, in order,
  with nothing extra;
- a header table with every field type pika can send (str, bytes, bool, small
  and large ints, Decimal, datetime, nested table, array, void; pika 1.2
  cannot send a float) and all
  14 basic properties arrive unchanged, compared as decoded pika values with
  their Python types;
- delivery tags, redelivered flags and basic.get message counts are the same,
  for a consumer with prefetch 100 that acks every message and for basic.get.
"""

import contextlib
import datetime
import decimal
import hashlib
import unittest

import pika
from pika.compat import long

import harness

N_EMPTY = 10_000
N_KIB = 10_000
N_MIB = 200
KIB_BY_GET = 500        # the first 500 KiB messages are fetched with basic.get
FULL_EVERY = {"empty": 1000, "kib": 250, "mib": 50}   # all-properties messages
PREFETCH = 100
FRAME_MAX = 131072

PARTS = (  # (kind, count, body size)
    ("empty", N_EMPTY, 0),
    ("kib", N_KIB, 1024),
    ("mib", N_MIB, 1024 * 1024),
)

# Every field type pika encodes (pika/data.py encode_value): S, x, t, I, l, D, T, F, A, V.
SENT_HEADERS = {
    "str": "h\u00e9llo w\u00f6rld \u2713",
    "str_empty": "",
    "bytes": bytes(range(256)),
    "bool_true": True,
    "bool_false": False,
    "int_small": 42,
    "int_negative": -7,
    "int_max32": 2**31 - 1,
    "int_min32": -(2**31),
    "int_large": 2**31,
    "int_huge": 2**62 + 12345,
    "int_large_negative": -(2**31) - 1,
    "decimal": decimal.Decimal("3.14159"),
    "decimal_negative": decimal.Decimal("-2.5"),
    "decimal_integral": decimal.Decimal("42"),
    "datetime": datetime.datetime(2024, 2, 29, 23, 59, 58),
    "nested": {"a": 1, "b": {"c": "deep", "d": [1, "two", False]}, "e": {}},
    "list": [1, "two", 2**40, True, None, b"\x00\xff", {"k": "v"}, [], ["x"]],
    "list_empty": [],
    "none": None,
}

# pika 1.2 cannot encode a float at all (UnsupportedAMQPFieldException), so there is
# no float header.  What pika decodes on the consumer side, the same directly and
# through the proxy: an int64 ('l') comes back as pika.compat.long (an int subclass,
# so the type tells 'l' from 'I'), decoded as unsigned (a pika quirk).
EXPECTED_HEADERS = dict(SENT_HEADERS)
EXPECTED_HEADERS["int_large"] = long(2**31)
EXPECTED_HEADERS["int_huge"] = long(2**62 + 12345)
EXPECTED_HEADERS["int_large_negative"] = long(2**64 - 2**31 - 1)
EXPECTED_HEADERS["list"] = [1, "two", long(2**40), True, None, b"\x00\xff", {"k": "v"}, [], ["x"]]


def body_for(kind, index, size):
    if size == 0:
        return b""
    return hashlib.shake_256(f"{kind}:{index}".encode()).digest(size)


def properties_for(kind, index):
    if index % FULL_EVERY[kind] == 0:
        headers = dict(SENT_HEADERS)
        headers["index"] = index
        return pika.BasicProperties(
            content_type="application/octet-stream",
            content_encoding="identity",
            headers=headers,
            delivery_mode=2,
            priority=4,  # above 4, a 4.x quorum queue would deliver it ahead of the rest
            correlation_id=f"corr-{kind}-{index}",
            reply_to="nackguard-it.reply",
            expiration="86400000",
            message_id=f"{kind}-{index}",
            timestamp=1_700_000_000 + index,
            type="nackguard.it.full",
            user_id="guest",
            app_id="nackguard-it",
            cluster_id="nackguard-it-cluster")
    if index % 2:
        return pika.BasicProperties(message_id=f"{kind}-{index}", headers={"index": index})
    return pika.BasicProperties()


def as_the_broker_sends(value):
    """A typed value (harness.typed) as this broker version delivers it. RabbitMQ 4.x keeps a
    message in a format of its own and writes a field table back with its keys sorted
    (measured on 4.3.6: every table, nested ones too, every value and type unchanged); 3.10
    keeps the publisher's order. Through nackguard the bytes are the broker's either way
    (assertSameThroughProxy compares the two targets in wire order)."""
    if harness.RABBITMQ_VERSION == "3.10":
        return value
    kind, inner = value
    if kind == "dict":
        return (kind, tuple(sorted(((k, as_the_broker_sends(v)) for k, v in inner),
                                   key=lambda item: item[0][1])))
    if kind in ("list", "tuple"):
        return (kind, tuple(as_the_broker_sends(v) for v in inner))
    return value


def expected_properties(kind, index):
    props = properties_for(kind, index)
    if props.headers is not None and "str" in props.headers:
        headers = dict(EXPECTED_HEADERS)
        headers["index"] = index
        props.headers = headers
    return tuple((name, as_the_broker_sends(value))
                 for name, value in harness.describe_properties(props))


class Part:
    """Checks the messages of one part as they arrive and records what it saw."""

    def __init__(self, kind, count, size):
        self.kind, self.count, self.size = kind, count, size
        self.records = []
        self.mismatches = []

    def check(self, method, props, body, message_count=None):
        index = len(self.records)
        if index >= self.count:
            self.mismatches.append(f"extra message beyond {self.count}: {len(body)} bytes")
            return
        if body != body_for(self.kind, index, self.size):
            self.mismatches.append(f"body of message {index} differs ({len(body)} bytes, "
                                   f"expected {self.size})")
        seen = harness.describe_properties(props)
        expected = expected_properties(self.kind, index)
        if seen != expected:
            differ = [(name, got) for (name, got), (_, want) in zip(seen, expected) if got != want]
            self.mismatches.append(f"properties of message {index} differ: {differ}"[:2000])
        self.records.append((method.delivery_tag, method.redelivered, method.exchange,
                             len(body), hashlib.blake2b(body, digest_size=8).hexdigest(),
                             seen if index % FULL_EVERY[self.kind] == 0 else None,
                             message_count))


def passthrough(target):
    """Publishes every part to its own queue, then consumes them; returns what was seen."""
    result = {}
    with contextlib.ExitStack() as stack:
        queues = {kind: stack.enter_context(harness.unique_queue(f"passthrough-{kind}"))
                  for kind, _, _ in PARTS}
        conn = harness.connect(target.port)
        stack.callback(harness.close_connection, conn)
        pub = conn.channel()
        for kind, count, size in PARTS:
            harness.declare_queue(pub, queues[kind])
            for i in range(count):
                pub.basic_publish("", queues[kind], body_for(kind, i, size),
                                  properties_for(kind, i))
        result["queued"] = {kind: harness.wait_message_count(pub, queues[kind], count, 30)
                            for kind, count, _ in PARTS}

        for kind, count, size in PARTS:
            queue = queues[kind]
            part = Part(kind, count, size)
            ch = conn.channel()
            ch.basic_qos(prefetch_count=PREFETCH)
            gets = KIB_BY_GET if kind == "kib" else 0
            for _ in range(gets):
                method, props, body = ch.basic_get(queue)
                if method is None:
                    part.mismatches.append("basic.get found the queue empty")
                    break
                part.check(method, props, body, method.message_count)
                ch.basic_ack(method.delivery_tag)

            def on_message(channel, method, props, body, part=part):
                part.check(method, props, body)
                channel.basic_ack(method.delivery_tag)

            ch.basic_consume(queue, on_message)
            finished = harness.drain(conn, lambda part=part, count=count:
                                     len(part.records) + len(part.mismatches) >= count, 120)
            # a grace period that would reveal an extra delivery
            conn.process_data_events(time_limit=0.2)
            result[kind] = {
                "finished": finished,
                "received": len(part.records),
                "records": part.records,
                "mismatches": part.mismatches[:20],
                "left_in_queue": ch.queue_declare(queue, passive=True).method.message_count,
                "get_after": ch.basic_get(queue)[0],
            }
            ch.close()
        result["frame_max"] = conn._impl.params.frame_max
    return result


class PassthroughTest(harness.IntegrationTest):
    # The shipped default: connections run on the io_context without strands. The other
    # suites run `threads: 2`, with a strand per connection.
    shared_proxy_threads = 1

    def check_result(self, result, target):
        self.assertEqual(result["queued"], {kind: count for kind, count, _ in PARTS},
                         f"{target}: messages in the queues after publishing")
        for kind, count, _ in PARTS:
            part = result[kind]
            self.assertEqual(part["mismatches"], [], f"{target}/{kind}: wrong messages")
            self.assertTrue(part["finished"],
                            f"{target}/{kind}: only {part['received']} of {count} arrived")
            self.assertEqual(part["received"], count, f"{target}/{kind}: message count")
            tags = [r[0] for r in part["records"]]
            self.assertEqual(tags, list(range(1, count + 1)), f"{target}/{kind}: delivery tags")
            self.assertFalse(any(r[1] for r in part["records"]), f"{target}/{kind}: redelivered")
            self.assertEqual(part["left_in_queue"], 0, f"{target}/{kind}: left in the queue")
            self.assertIsNone(part["get_after"], f"{target}/{kind}: basic.get after consuming")
        counts = [r[6] for r in result["kib"]["records"][:KIB_BY_GET]]
        self.assertEqual(counts, [N_KIB - 1 - i for i in range(KIB_BY_GET)],
                         f"{target}: basic.get-ok message_count values")

    def test_bodies_properties_and_headers_pass_unchanged(self):
        direct, proxied = self.run_both(passthrough)
        self.check_result(direct, "direct")
        self.check_result(proxied, "proxy")
        self.assertEqual(direct["frame_max"], FRAME_MAX)
        for key in direct:
            self.assertSameThroughProxy(direct[key], proxied[key], key)

    def test_full_headers_round_trip_exactly(self):
        """Every header type sent by pika is decoded as expected (one message)."""
        def one(target):
            with harness.unique_queue("headers") as queue:
                conn = harness.connect(target.port)
                try:
                    ch = conn.channel()
                    harness.declare_queue(ch, queue)
                    ch.basic_publish("", queue, b"h", properties_for("empty", 0))
                    method, props, body = harness.get_message(ch, queue)
                    return method is not None, body, props.headers if props else None, \
                        harness.describe_properties(props) if props else None
                finally:
                    harness.close_connection(conn)

        direct, proxied = self.run_both(one)
        for target, (got, body, headers, described) in (("direct", direct), ("proxy", proxied)):
            self.assertTrue(got, f"{target}: no message")
            self.assertEqual(body, b"h")
            expected = dict(EXPECTED_HEADERS, index=0)
            self.assertEqual(harness.typed(headers),
                             as_the_broker_sends(harness.typed(expected)), target)
            self.assertEqual(described, expected_properties("empty", 0), target)
            self.assertTrue(all(value != ("NoneType", "None") for name, value in described
                                if name != "headers"), f"{target}: a property was not set")
        self.assertSameThroughProxy(direct, proxied)


if __name__ == "__main__":
    unittest.main()
