# ctest-variants: rmq43 rmq43.quorum
"""Running nackguard: metrics and health endpoints, end to end.

Every test starts its own proxy process (operations_support.OpsProxy) with its own config
(free ports for listen and metrics) and its own policy directory, in front of the private
RabbitMQ node (NACKGUARD_TEST_BROKER_PORT); /metrics is parsed as the Prometheus text
format 0.0.4 by operations_support.parse_metrics, which checks the format as it goes.
Reload, drain and logs (5-7) are tested in test_operations_lifecycle.py.

1. metrics of the redelivery scenario: 99 good messages + 1 poison nacked every time,
   max_redeliveries 5: deliveries_total{queue} 105, returns_total 6, requeues_total
   forwarded 3 / republished 2 / delayed 0 / dead_lettered 1 (under `requeue: immediate` the
   first return since a copy is forwarded, the next republished with its count),
   dead_letters_total{reason=max_redeliveries} 1,
   returns_before_dead_letter count 1 and sum 6; frames and bytes counters > 0 and every
   counter monotone across scrapes; client_connections 1 while connected, 0 within 3 s of
   the close; build_info's version is what --version prints; every metric has HELP and TYPE;
   /readyz 200 and /healthz 200 in front of a live broker.
2. requeue: delayed counts requeues_total{action=delayed}; a user without configure
   permission makes the dead-letter copy fail: fallbacks_total{cause=republish_failed} >= 1.
3. metrics.max_queue_labels 3 with deliveries on 5 queues: exactly 3 queue label values
   plus "_other", which carries the other two queues' deliveries.
4. upstream port closed: /readyz 503 "not ready: ..." naming host:port, /healthz 200, a pika
   connection fails within 6 s, upstream_connect_failures_total counts it; once something
   answers on that port, /readyz turns 200.
8. the metrics port: a 16 KiB header gets 431 and the proxy still serves; 100 slow clients
   (one byte a second) do not hang a scrape (it is served or closed at once) and /healthz
   answers within 2 s of their leaving; garbage gets 400; 404 and 405.
"""

import http.client
import socket
import time
import unittest
import uuid

import pika
from pika.exceptions import AMQPConnectionError

import harness
import operations_support as ops
import redelivery_support as rs
import waiting
from operations_support import POISON, immediate_policy
from redelivery_support import NO_RATE_LIMITS, props

DIRECTIONS = ("client_to_broker", "broker_to_client")
ACTIONS = ("forwarded", "delayed", "dead_lettered")
CAUSES = ("body_not_retained", "no_channel", "malformed_properties", "republish_failed",
          "at_broker_limit", "encode_failed")


class OperationsTest(ops.OpsTest):

    # ------------------------------------------------------------ 1. redelivery metrics

    def test_1_metrics_of_a_poison_loop(self):
        queue = self.queue_name("metrics")
        proxy = self.start_ops({"q.yaml": immediate_policy(queue)})
        version = ops.proxy_version()
        self.broker.declare(queue)
        self.publish_mix(queue)

        status, body = proxy.wait_ready(200, timeout=8)
        self.assertEqual((status, body), (200, "ready\n"), "/readyz in front of a live broker")
        self.assertEqual(proxy.get("/healthz")[::2], (200, "ok\n"))

        pages = [proxy.metrics()]
        first = pages[0]
        self.assert_well_formed(first)
        self.assertEqual(first.series("nackguard_build_info"), [({"version": version}, 1.0)])
        self.assertEqual(first.value("nackguard_client_connections"), 0)
        self.assertEqual(first.value("nackguard_upstream_connect_failures_total",
                                     address=f"127.0.0.1:{harness.BROKER_PORT}"), 0)
        self.assertEqual(first.labels_of("nackguard_frames_total", "direction"), set(DIRECTIONS))
        self.assertEqual(first.series("nackguard_deliveries_total"), [],
                         "a queue series before any delivery")
        self.assertEqual(first.value("nackguard_retained_body_bytes_limit"), 268435456)
        self.assertEqual(first.value("nackguard_policy_reloads_total", result="ok"), 0)
        self.assertEqual(first.value("nackguard_policy_reloads_total", result="error"), 0)

        consumer = self.consumer(
            proxy, queue, lambda d: "nack" if d.label == POISON else "ack", prefetch=10)
        rs.poll_until([consumer], lambda: len(consumer.deliveries) >= 1, timeout=10)
        during = proxy.metrics()
        pages.append(during)
        self.assertEqual(during.value("nackguard_client_connections"), 1,
                         "client_connections with one pika connection open")

        done = rs.poll_until(
            [consumer], lambda: sum(consumer.acks.values()) >= 99 and self.dlq_count(queue) >= 1,
            timeout=60, quiet=0.5)
        self.assertTrue(done, f"not done in 60 s: {sum(consumer.acks.values())} acks, "
                              f"{consumer.delivered(POISON)} poison deliveries")
        self.assertEqual(consumer.delivered(POISON), 6, "poison deliveries (max_redeliveries 5)")
        page = proxy.wait_metric("nackguard_requeues_total", 1, queue=queue,
                                 action="dead_lettered")
        pages.append(page)
        self.assert_well_formed(page)
        # The counting model (docs/choosing-a-policy.md, "How nackguard counts"): the first
        # return since the message's copy is forwarded (the broker's redelivered flag carries
        # it), the next one is taken over and republished to the queue's tail with its count
        # (x-nackguard-returns); the 6th passes max_redeliveries 5. Returns 1, 3, 5 forwarded,
        # 2 and 4 republished, 6 dead-lettered. On a quorum queue a copy is exact (its
        # redelivered flag counts nothing), so every return after the first is republished:
        # 1 forwarded, 2 to 5 republished. No republish at a delivery either way (4.3 does not
        # count a nack in x-delivery-count), so the 6 deliveries are the consumer's 6.
        forwarded = 3 if harness.QUEUE_TYPE == "classic" else 1
        expect = {
            ("nackguard_deliveries_total", (("queue", queue),)): 105,
            ("nackguard_returns_total", (("queue", queue),)): 6,
            ("nackguard_requeues_total", (("queue", queue), ("action", "forwarded"))): forwarded,
            ("nackguard_requeues_total", (("queue", queue), ("action", "republished"))):
                5 - forwarded,
            ("nackguard_requeues_total", (("queue", queue), ("action", "delayed"))): 0,
            ("nackguard_requeues_total", (("queue", queue), ("action", "dead_lettered"))): 1,
            ("nackguard_dead_letters_total",
             (("queue", queue), ("reason", "max_redeliveries"))): 1,
            ("nackguard_dead_letters_total", (("queue", queue), ("reason", "crash_loop"))): 0,
            ("nackguard_returns_before_dead_letter_count", ()): 1,
            ("nackguard_returns_before_dead_letter_sum", ()): 6,
            ("nackguard_outage", (("queue", queue),)): 0,
        }
        got = {key: page.value(key[0], **dict(key[1])) for key in expect}
        self.assertEqual(got, expect)
        for cause in CAUSES:
            self.assertEqual(page.value("nackguard_fallbacks_total", queue=queue, cause=cause), 0,
                             f"fallbacks_total cause={cause}")
        buckets = ops.check_histogram(page, "nackguard_returns_before_dead_letter")
        self.assertEqual((buckets["5"], buckets["10"], buckets["+Inf"]), (0, 1, 1),
                         f"returns_before_dead_letter buckets {buckets}")
        self.assertEqual(page.labels_of("nackguard_deliveries_total", "queue"), {queue})
        for direction in DIRECTIONS:
            frames = page.value("nackguard_frames_total", direction=direction)
            nbytes = page.value("nackguard_bytes_total", direction=direction)
            self.assertGreater(frames, 0, f"frames_total{{direction={direction}}}")
            self.assertGreaterEqual(nbytes, 8 * frames,
                                    f"bytes_total{{direction={direction}}}: every frame has "
                                    "at least 8 bytes")
        # 100 deliveries of at least 3 frames each went to the client.
        self.assertGreaterEqual(page.value("nackguard_frames_total",
                                           direction="broker_to_client"), 3 * 105)
        self.assertEqual(page.value("nackguard_client_connections"), 1)

        self.assertTrue(consumer.close(), "the consumer's connection did not close cleanly")
        last = proxy.wait_metric("nackguard_client_connections", 0, timeout=3.0)
        pages.append(last)
        self.assertEqual(last.value("nackguard_client_connections"), 0,
                         "client_connections 3 s after the connection closed")
        self.assert_counters_monotone(pages)
        for direction in DIRECTIONS:
            self.assertGreater(last.value("nackguard_frames_total", direction=direction),
                               during.value("nackguard_frames_total", direction=direction))
        self.assertEqual(last.value("nackguard_deliveries_total", queue=queue), 105,
                         "deliveries changed after the close")
        self.assert_proxy_alive(proxy)

    # ------------------------------------------------------------ 2. delayed and fallback

    def test_2_delayed_requeues_and_fallbacks(self):
        queue = self.queue_name("delayed", delay_ttls_ms=(200,))
        limited_queue = self.queue_name("fallback")
        proxy = self.start_ops({
            "delayed.yaml": rs.policy_yaml(
                queue, max_redeliveries=2, requeue="delayed",
                backoff={"initial": "200ms", "multiplier": 1, "max": "200ms", "jitter": "none"},
                rate=NO_RATE_LIMITS),
            "limited.yaml": immediate_policy(limited_queue, max_redeliveries=2)})
        self.broker.declare(queue)
        self.broker.publish(queue, [(b"delayed-poison", props(message_id="d-" + uuid.uuid4().hex))])
        consumer = self.consumer(proxy, queue, lambda d: "nack", prefetch=10)
        done = rs.poll_until([consumer], lambda: self.dlq_count(queue) >= 1, timeout=20,
                             quiet=0.3)
        self.assertTrue(done, f"not dead-lettered in 20 s; {consumer.delivered()} deliveries")
        self.assertEqual(consumer.delivered(), 3, "deliveries (max_redeliveries 2)")
        page = proxy.wait_metric("nackguard_requeues_total", 1, queue=queue,
                                 action="dead_lettered")
        got = {
            "deliveries": page.value("nackguard_deliveries_total", queue=queue),
            "returns": page.value("nackguard_returns_total", queue=queue),
            **{a: page.value("nackguard_requeues_total", queue=queue, action=a) for a in ACTIONS},
            "dead_letters": page.value("nackguard_dead_letters_total", queue=queue,
                                       reason="max_redeliveries"),
        }
        self.assertEqual(got, {"deliveries": 3, "returns": 3, "forwarded": 0, "delayed": 2,
                               "dead_lettered": 1, "dead_letters": 1})
        self.assertTrue(consumer.close())

        # A user who may not configure anything: the proxy cannot declare <queue>.dlq.
        if harness.RABBITMQCTL is None:
            self.skipTest("NACKGUARD_TEST_RABBITMQCTL is not set (needed for the fallback part)")
        # This run's own user: the module's variants may run at the same time against one node
        # (ctest -j4), and one's cleanup deleting a shared user closed the other's connections.
        user = f"nackguard-ops-limited-{uuid.uuid4().hex[:8]}"
        ops.add_user(user, "limited-pw", configure="^$")
        self.addCleanup(lambda: harness.rabbitmqctl("delete_user", user))
        self.broker.declare(limited_queue)
        self.publish_mix(limited_queue)
        limited = self.consumer(
            proxy, limited_queue, lambda d: "nack" if d.label == POISON else "ack", prefetch=10,
            credentials=pika.PlainCredentials(user, "limited-pw"))
        deadline = time.monotonic() + 15
        fallbacks = 0
        while time.monotonic() < deadline:
            limited.poll(0.2)
            fallbacks = proxy.metrics().value("nackguard_fallbacks_total", queue=limited_queue,
                                              cause="republish_failed")
            if fallbacks >= 1 and sum(limited.acks.values()) >= 99:
                break
        self.assertGreaterEqual(fallbacks, 1, "fallbacks_total{cause=republish_failed}")
        self.assertTrue(limited.ch.is_open and limited.conn.is_open,
                        "the consumer's channel or connection was closed")
        page = proxy.metrics()
        self.assertEqual(page.value("nackguard_dead_letters_total", queue=limited_queue,
                                    reason="max_redeliveries"), 0)
        self.assertEqual(page.value("nackguard_requeues_total", queue=limited_queue,
                                    action="dead_lettered"), 0)
        self.assertGreaterEqual(len(proxy.log_lines(
            f"fallback: queue={limited_queue} cause=republish_failed")), 1)
        self.assertTrue(limited.close())
        self.assertIsNone(self.broker.message_count(f"{limited_queue}.dlq"),
                          "the DLQ exists though the user may not declare it")
        self.assert_proxy_alive(proxy)

    # ------------------------------------------------------------ 3. queue label cap

    def test_3_queue_label_cap(self):
        queues = [self.queue_name(f"cap{i}") for i in range(5)]
        proxy = self.start_ops(config={"metrics": {"max_queue_labels": 3}})
        for i, queue in enumerate(queues):
            self.broker.declare(queue)
            self.broker.publish(queue, [(f"m{i}-{k}".encode(), props()) for k in range(i + 1)])
        # One queue after the other, so the first three seen are queues[0..2].
        for i, queue in enumerate(queues):
            c = self.consumer(proxy, queue, lambda d: "ack", prefetch=10)
            self.assertTrue(rs.poll_until([c], lambda: sum(c.acks.values()) >= i + 1, timeout=10),
                            f"{queue}: {c.delivered()} deliveries")
            self.assertTrue(c.close())
        page = proxy.wait_metric("nackguard_deliveries_total", 4 + 5, queue="_other")
        labels = set(queues[:3]) | {"_other"}
        for name in ("nackguard_deliveries_total", "nackguard_returns_total",
                     "nackguard_requeues_total", "nackguard_dead_letters_total",
                     "nackguard_fallbacks_total", "nackguard_outage"):
            self.assertEqual(page.labels_of(name, "queue"), labels, f"{name} queue labels")
        got = {labels["queue"]: value for labels, value in page.series("nackguard_deliveries_total")}
        self.assertEqual(got, {queues[0]: 1, queues[1]: 2, queues[2]: 3, "_other": 9})
        self.assertNotIn(queues[3], page.text)
        self.assertNotIn(queues[4], page.text)
        # "_other" comes last, after the named queues sorted by name.
        order = [labels["queue"] for labels, _ in page.series("nackguard_deliveries_total")]
        self.assertEqual(order, sorted(queues[:3]) + ["_other"])

    # ------------------------------------------------------------ 4. upstream unreachable

    def test_4_upstream_unreachable(self):
        closed_port = harness.free_port()
        proxy = self.start_ops(upstream_port=closed_port,
                               config={"upstream": {"host": "127.0.0.1", "port": closed_port,
                                                    "connect_timeout": "2s"}})
        target = f"127.0.0.1:{closed_port}"
        status, _, body = waiting.poll(lambda: proxy.get("/readyz"),
                                       lambda answer: answer[0] == 503 and target in answer[2],
                                       8, 0.1)
        self.assertEqual(status, 503, f"/readyz: {body!r}")
        self.assertTrue(body.startswith("not ready: "), f"/readyz body {body!r}")
        self.assertIn(target, body)
        self.assertEqual(proxy.get("/healthz")[::2], (200, "ok\n"))
        self.assertEqual(proxy.metrics().value("nackguard_upstream_connect_failures_total",
                                               address=target), 0)

        t0 = time.monotonic()
        with self.assertRaises(AMQPConnectionError):
            conn = harness.connect(proxy.port)
            harness.close_connection(conn)
        elapsed = time.monotonic() - t0
        self.assertLess(elapsed, 6.0, "the pika connection did not fail promptly")
        page = proxy.wait_metric("nackguard_upstream_connect_failures_total", 1, timeout=2,
                                 address=target)
        self.assertEqual(page.value("nackguard_upstream_connect_failures_total", address=target), 1)
        self.assertEqual(page.value("nackguard_upstream_unavailable_total"), 1)
        self.assertGreaterEqual(len(proxy.log_lines(f"cannot connect to upstream {target}")), 1)
        page = proxy.wait_metric("nackguard_client_connections", 0, timeout=3)
        self.assertEqual(page.value("nackguard_client_connections"), 0)
        self.assert_proxy_alive(proxy)

        # Once the port answers (a bare TCP listener is enough for the probe), it is ready.
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.addCleanup(listener.close)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", closed_port))
        listener.listen(16)
        status, body = proxy.wait_ready(200, timeout=8)
        self.assertEqual((status, body), (200, "ready\n"), "/readyz once the port answers")

    # ------------------------------------------------------------ 8. HTTP robustness

    def test_8_metrics_port_robustness(self):
        proxy = self.start_ops()
        port = proxy.metrics_port

        big = (b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 16384 + b"\r\n\r\n")
        status, raw = ops.raw_http(port, big)
        self.assertEqual(status, 431, f"answer to a 16 KiB header: {raw[:200]!r}")
        self.assertEqual(proxy.get("/metrics")[0], 200, "no service after the 431")

        for garbage in (b"this is not http\r\n\r\n", b"\x16\x03\x01\x02\x00\x01\x00\xff\r\n\r\n"):
            status, raw = ops.raw_http(port, garbage)
            self.assertEqual(status, 400, f"answer to {garbage!r}: {raw[:200]!r}")
        self.assertEqual(proxy.get("/nope")[0], 404)
        status, raw = ops.raw_http(port, b"POST /metrics HTTP/1.1\r\nHost: x\r\n"
                                         b"Content-Length: 0\r\nConnection: close\r\n\r\n")
        self.assertEqual(status, 405, raw[:200])

        # 100 slow clients, each sending one byte of a request per second; every scrape
        # waits for a round of one byte to every client, so that they trickle in between.
        request = b"GET /metrics HTTP/1.1\r\nHost: slow\r\n\r\n"
        slow = ops.SlowClients(port, request, count=100)
        self.addCleanup(slow.close)
        outcomes = []
        wanted = 1  # the first scrape once every slow client has been sent a byte
        for _ in range(3):
            self.assertTrue(slow.wait_round(wanted),
                            f"the slow clients were not sent byte {wanted} within 5 s")
            t0 = time.monotonic()
            try:
                status, _, body = proxy.get("/metrics", timeout=4)
                outcome = ("served", status)
            except (OSError, http.client.HTTPException) as exc:
                outcome = ("closed", type(exc).__name__)
            elapsed = time.monotonic() - t0
            outcomes.append((outcome, round(elapsed, 2)))
            self.assertLess(elapsed, 2.0, f"a scrape during the slow clients took {elapsed:.2f} s "
                                          f"({outcome})")
            if outcome[0] == "served":
                self.assertEqual(outcome[1], 200)
            wanted = slow.rounds + 1  # the next scrape after one more byte to every client
        slow.close()
        answered = None

        def healthz():  # the last answer /healthz gave (None before the first)
            nonlocal answered
            try:
                answered = proxy.get("/healthz", timeout=1)[::2]
            except (OSError, http.client.HTTPException):
                pass
            return answered

        waiting.poll(healthz, lambda answer: answer == (200, "ok\n"), 2.0)
        self.assertEqual(answered, (200, "ok\n"),
                         f"/healthz within 2 s after the slow clients left (scrapes during: "
                         f"{outcomes})")
        self.assertEqual(proxy.get("/metrics")[0], 200)
        self.assert_proxy_alive(proxy)


if __name__ == "__main__":
    unittest.main()
