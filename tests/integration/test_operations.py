# ctest-variants: rmq43 rmq43.quorum
"""Running nackguard: metrics, health endpoints, reload, drain and logs, end to end.

Every test starts its own proxy process (operations_support.OpsProxy) with its own config
(free ports for listen and metrics) and its own policy directory, in front of the private
RabbitMQ node (NACKGUARD_TEST_BROKER_PORT); /metrics is parsed as the Prometheus text
format 0.0.4 by operations_support.parse_metrics, which checks the format as it goes.

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
5. SIGHUP: policy 5 -> 2 applies to a new poison (3 deliveries), a connection opened before
   the reload keeps working; a corrupted policy file keeps 2 in force, logs the file:line
   error, and policy_reloads_total is ok 1 / error 1; a later reload applies log.level.
   5b: a config file that does not load counts as a failed reload; a key that needs a
   restart (threads) is logged as such on reload, while shutdown.grace applies at once.
6. SIGTERM with shutdown.grace 2s: /readyz 503 and new connections refused during the grace,
   the consumer gets connection.close 320 after ~2 s, exit 0 within grace + 3 s; a client
   that leaves by itself lets the proxy exit before the grace ends; a second SIGTERM exits
   at once with code 1 (6a-6c). 6d: a client that never answers the connection.close (it
   reads nothing, heartbeats off) does not keep the proxy from exiting.
7. log.format json: every stderr line is a JSON object with time, level, msg; one
   "dead-lettered" line per dead-letter with queue, identity, returns, reason; neither a
   message body nor a password appears anywhere in the output (log.level debug).
   7b: a message_id with quotes, a newline or bytes that are not UTF-8 still gives lines
   that are UTF-8 JSON.
8. the metrics port: a 16 KiB header gets 431 and the proxy still serves; 100 slow clients
   (one byte a second) do not hang a scrape (it is served or closed at once) and /healthz
   answers within 2 s of their leaving; garbage gets 400; 404 and 405.
"""

import http.client
import re
import signal
import socket
import threading
import time
import unittest
import uuid

import pika
from pika.exceptions import AMQPConnectionError, ConnectionClosedByBroker

import harness
import operations_support as ops
import redelivery_support as rs
from redelivery_support import NO_RATE_LIMITS, props

POISON = "poison"
GOODS = [f"good-{i:02d}" for i in range(99)]

# Every metric nackguard exports (proxy/metrics/metric_list.hpp) and its TYPE.
EXPECTED_TYPES = {
    "nackguard_build_info": "gauge",
    "nackguard_client_connections": "gauge",
    "nackguard_upstream_connections": "gauge",
    "nackguard_upstream_connect_failures_total": "counter",
    "nackguard_upstream_unavailable_total": "counter",
    "nackguard_accept_failures_total": "counter",
    "nackguard_frames_total": "counter",
    "nackguard_bytes_total": "counter",
    "nackguard_deliveries_total": "counter",
    "nackguard_returns_total": "counter",
    "nackguard_requeues_total": "counter",
    "nackguard_dead_letters_total": "counter",
    "nackguard_fallbacks_total": "counter",
    "nackguard_ack_timeouts_total": "counter",
    "nackguard_outage": "gauge",
    "nackguard_outage_messages": "gauge",
    "nackguard_outage_messages_dropped_total": "counter",
    "nackguard_outage_max_reached_total": "counter",
    "nackguard_tracker_entries": "gauge",
    "nackguard_tracker_evictions_total": "counter",
    "nackguard_tracker_expiries_total": "counter",
    "nackguard_queue_facts": "gauge",
    "nackguard_queue_facts_forgotten_total": "counter",
    "nackguard_management_lookups_total": "counter",
    "nackguard_management_limits_known": "gauge",
    "nackguard_management_limits_forgotten_total": "counter",
    "nackguard_retained_body_bytes": "gauge",
    "nackguard_retained_body_bytes_limit": "gauge",
    "nackguard_retained_body_refusals_total": "counter",
    "nackguard_untracked_deliveries_total": "counter",
    "nackguard_policy_reloads_total": "counter",
    "nackguard_returns_before_dead_letter": "histogram",
}
DIRECTIONS = ("client_to_broker", "broker_to_client")
ACTIONS = ("forwarded", "delayed", "dead_lettered")
CAUSES = ("body_not_retained", "no_channel", "malformed_properties", "republish_failed",
          "at_broker_limit", "encode_failed")
SHUTDOWN_TEXT = "CONNECTION_FORCED - nackguard is shutting down"


# Reloads on SIGHUP alone, not on a change to a watched file.
SIGHUP_ONLY = {"reload": {"watch": False}}


def immediate_policy(queue, max_redeliveries=5):
    return rs.policy_yaml(queue, max_redeliveries=max_redeliveries, requeue="immediate",
                          rate=NO_RATE_LIMITS)


class OperationsTest(ops.OpsTest):

    # ------------------------------------------------------------ helpers

    def publish_mix(self, queue, poison_props=None):
        """99 good messages and the poison at index 37; body = label."""
        messages = [(label.encode(), props(message_id=f"mid-{label}")) for label in GOODS]
        messages.insert(37, (POISON.encode(),
                             poison_props or props(message_id="poison-" + uuid.uuid4().hex)))
        self.broker.publish(queue, messages)

    def dlq_count(self, queue):
        return self.broker.message_count(f"{queue}.dlq") or 0

    def assert_counters_monotone(self, pages):
        for n, (earlier, later) in enumerate(zip(pages, pages[1:])):
            now = later.counters()
            for key, value in earlier.counters().items():
                self.assertIn(key, now, f"series {key} vanished between scrapes {n} and {n + 1}")
                self.assertGreaterEqual(now[key], value,
                                        f"counter {key} went down between scrapes {n} and "
                                        f"{n + 1}")

    def assert_well_formed(self, page):
        """Every metric on the page has HELP and TYPE, every documented metric is there with
        its type, and the histogram's invariants hold."""
        self.assertEqual(page.content_type, "text/plain; version=0.0.4; charset=utf-8")
        for name, family in page.families.items():
            self.assertIsNotNone(family.help, f"{name} has no HELP line")
            self.assertTrue(family.help.strip(), f"{name} has an empty HELP text")
            self.assertIsNotNone(family.type, f"{name} has no TYPE line")
            self.assertTrue(name.startswith("nackguard_"), f"metric {name} lacks the prefix")
        types = {n: f.type for n, f in page.families.items()}
        self.assertEqual({n: types.get(n) for n in EXPECTED_TYPES}, EXPECTED_TYPES,
                         "a metric is missing or has another TYPE")
        ops.check_histogram(page, "nackguard_returns_before_dead_letter")

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
        deadline = time.monotonic() + 3.0
        while True:
            last = proxy.metrics()
            if last.value("nackguard_client_connections") == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
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
        user = "nackguard-ops-limited"
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
        deadline = time.monotonic() + 8
        while True:
            status, _, body = proxy.get("/readyz")
            if (status == 503 and target in body) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
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

    # ------------------------------------------------------------ 5. reload

    def test_5_reload_policies(self):
        queue = self.queue_name("reload")
        # reload.watch false: the files are written in place, and a watched change would be a
        # reload of its own (test_reload_watch tests those).
        proxy = self.start_ops({"q.yaml": immediate_policy(queue, max_redeliveries=5)},
                               config=SIGHUP_ONLY)
        self.broker.declare(queue)
        # A connection opened before the reload, used after it.
        consumer = self.consumer(proxy, queue, lambda d: "nack", prefetch=10)
        consumer.poll(0.2)

        proxy.write_policy("q.yaml", immediate_policy(queue, max_redeliveries=2))
        proxy.signal(signal.SIGHUP)
        page = proxy.wait_metric("nackguard_policy_reloads_total", 1, result="ok")
        self.assertEqual(page.value("nackguard_policy_reloads_total", result="ok"), 1)
        self.assertEqual(len(proxy.wait_log("reload: 1 policies loaded from")), 1)

        first = "first-" + uuid.uuid4().hex
        self.broker.publish(queue, [(b"first", props(message_id=first))])
        self.assertTrue(rs.poll_until([consumer], lambda: self.dlq_count(queue) >= 1, timeout=15,
                                      quiet=0.3), "the first poison was not dead-lettered")
        self.assertEqual(consumer.delivered("first"), 3, "deliveries after the reload to 2")
        self.assertTrue(consumer.ch.is_open and consumer.conn.is_open,
                        "the connection opened before the reload was closed")

        # A corrupted policy file: the reload fails, the previous policies stay.
        proxy.write_policy("q.yaml", f"queue: {queue}\nmax_redeliveries: lots\n")
        proxy.signal(signal.SIGHUP)
        page = proxy.wait_metric("nackguard_policy_reloads_total", 1, result="error")
        self.assertEqual((page.value("nackguard_policy_reloads_total", result="ok"),
                          page.value("nackguard_policy_reloads_total", result="error")), (1, 1))
        failed = proxy.wait_log("reload failed, the previous policies stay in force: ")
        self.assertEqual(len(failed), 1, f"reload failure lines: {failed}")
        self.assertIn(f"{proxy.policy_path('q.yaml')}:2:", failed[0])
        self.assertIn("max_redeliveries", failed[0])

        second = "second-" + uuid.uuid4().hex
        self.broker.publish(queue, [(b"second", props(message_id=second))])
        self.assertTrue(rs.poll_until([consumer], lambda: self.dlq_count(queue) >= 2, timeout=15,
                                      quiet=0.3), "the second poison was not dead-lettered")
        self.assertEqual(consumer.delivered("second"), 3,
                         "deliveries after the failed reload (2 should still apply)")
        self.assertTrue(consumer.ch.is_open and consumer.conn.is_open)
        dead = proxy.log_lines(f"dead-lettered: queue={queue} ")
        self.assertEqual(len(dead), 2, f"dead-lettered lines: {dead}")
        self.assertIn(f"identity=message_id:{first} returns=3 reason=max_redeliveries", dead[0])
        self.assertIn(f"identity=message_id:{second} returns=3 reason=max_redeliveries", dead[1])

        # A good file again, with log.level warn: the reload applies the level, so its own
        # "policies loaded" info line is not written.
        proxy.write_policy("q.yaml", immediate_policy(queue, max_redeliveries=2))
        proxy.config["log"] = {"level": "warn"}
        proxy.write_config()
        proxy.signal(signal.SIGHUP)
        page = proxy.wait_metric("nackguard_policy_reloads_total", 2, result="ok")
        self.assertEqual(page.value("nackguard_policy_reloads_total", result="ok"), 2)
        # A reload writes its "policies loaded" line (flushed: the log flushes every info
        # line) before it counts itself in the metric: had it been written, it is there now.
        self.assertEqual(len(proxy.log_lines("reload: 1 policies loaded from")), 1,
                         "an info line was written after log.level warn was reloaded")
        self.assertTrue(consumer.close())
        self.assert_proxy_alive(proxy)

    def test_5b_reload_names_keys_that_need_a_restart(self):
        proxy = self.start_ops(config={"shutdown": {"grace": "2s"}, **SIGHUP_ONLY})
        # A config file that does not load: the reload fails as a whole.
        with open(proxy.config_path, "a") as f:
            f.write("no_such_key: 1\n")
        proxy.signal(signal.SIGHUP)
        page = proxy.wait_metric("nackguard_policy_reloads_total", 1, result="error")
        self.assertEqual(page.value("nackguard_policy_reloads_total", result="error"), 1)
        failed = proxy.wait_log("reload failed, the previous policies stay in force: ")
        self.assertEqual(len(failed), 1, f"reload failure lines: {failed}")
        self.assertIn(f"{proxy.config_path}:", failed[0])
        self.assertIn("no_such_key", failed[0])
        proxy.config["threads"] = 1
        proxy.config["shutdown"] = {"grace": "5s"}
        proxy.write_config()
        proxy.signal(signal.SIGHUP)
        page = proxy.wait_metric("nackguard_policy_reloads_total", 1, result="ok")
        self.assertEqual(page.value("nackguard_policy_reloads_total", result="ok"), 1)
        proxy.wait_log("reload: 0 policies loaded from")
        lines = proxy.log_lines(f"reload: threads changed in {proxy.config_path} but takes "
                                "effect only after a restart")
        self.assertEqual(len(lines), 1, f"no restart warning for threads after changing it and "
                                        f"SIGHUP; reload lines: {proxy.log_lines('reload')}")
        # shutdown.grace is read when a shutdown begins, so a reload applies it: no warning.
        self.assertEqual(proxy.log_lines("reload: shutdown"), [])

    # ------------------------------------------------------------ 6. drain

    def drain_proxy(self, grace):
        queue = self.queue_name("drain")
        proxy = self.start_ops(config={"shutdown": {"grace": grace}})
        self.broker.declare(queue)
        consumer = self.consumer(proxy, queue, lambda d: "ack", prefetch=10)
        consumer.poll(0.1)
        return proxy, consumer

    def test_6a_drain_closes_clients_after_the_grace(self):
        proxy, consumer = self.drain_proxy("2s")
        self.assertEqual(proxy.get("/readyz")[0], 200)
        t0 = time.monotonic()
        proxy.signal(signal.SIGTERM)
        consumer.poll(0.3)
        status, _, body = proxy.get("/readyz")
        self.assertEqual((status, body), (503, "not ready: draining: shutting down\n"),
                         "/readyz during the grace")
        self.assertEqual(proxy.get("/healthz")[0], 200, "/healthz during the grace")
        with self.assertRaises(ConnectionRefusedError,
                               msg="a new TCP connection was accepted during the grace"):
            socket.create_connection(("127.0.0.1", proxy.port), timeout=2).close()
        with self.assertRaises(AMQPConnectionError):
            harness.connect(proxy.port)
        closed = None
        while time.monotonic() - t0 < 8:
            try:
                consumer.poll(0.05)
            except ConnectionClosedByBroker as exc:
                closed = (time.monotonic() - t0, exc.reply_code, exc.reply_text)
                break
        self.assertIsNotNone(closed, "the consumer was not closed within 8 s of SIGTERM")
        self.assertEqual(closed[1:], (320, SHUTDOWN_TEXT))
        self.assertTrue(1.5 <= closed[0] <= 5.0,
                        f"closed {closed[0]:.2f} s after SIGTERM (grace 2 s)")
        code = proxy.wait_exit(max(0.1, t0 + 5.0 - time.monotonic()))
        self.assertEqual(code, 0, "exit code (None: still running 5 s after SIGTERM)")
        self.assertEqual(len(proxy.log_lines("clients get 2000 ms to leave")), 1)
        self.assertEqual(len(proxy.log_lines("nackguard stopped")), 1)

    def test_6b_drain_ends_when_the_last_client_leaves(self):
        proxy, consumer = self.drain_proxy("10s")
        t0 = time.monotonic()
        proxy.signal(signal.SIGINT)  # SIGINT drains like SIGTERM
        consumer.poll(0.3)
        self.assertTrue(proxy.alive(), "exited at once with a client connected")
        self.assertEqual(proxy.get("/readyz")[0], 503)
        self.assertTrue(consumer.close(), "the client's own close during the grace failed")
        code = proxy.wait_exit(3.0)
        elapsed = time.monotonic() - t0
        self.assertEqual(code, 0, "exit code (None: still running 3 s after SIGINT, grace 10 s)")
        self.assertLess(elapsed, 3.5)
        self.assertEqual(len(proxy.log_lines("signal 2: no new connections; clients get 10000 ms")),
                         1)

    def test_6c_second_signal_exits_at_once(self):
        proxy, consumer = self.drain_proxy("10s")
        proxy.signal(signal.SIGTERM)
        consumer.poll(0.5)
        self.assertTrue(proxy.alive(), "exited before the grace with a client connected")
        t1 = time.monotonic()
        proxy.signal(signal.SIGTERM)
        code = proxy.wait_exit(2.0)
        self.assertEqual(code, 1, "exit code after a second SIGTERM (None: still running 2 s "
                                  "later)")
        self.assertLess(time.monotonic() - t1, 1.0)
        self.assertEqual(len(proxy.log_lines("second signal 15: exiting at once")), 1)

    def test_6d_a_client_that_never_answers_the_close_does_not_block_the_exit(self):
        """A consumer stuck in a long callback (it reads nothing, and heartbeats are off)
        never answers connection.close; the drain must still end."""
        queue = self.queue_name("drain-stuck")
        proxy = self.start_ops(config={"shutdown": {"grace": "2s"}})
        self.broker.declare(queue)
        stuck = harness.connect(proxy.port, heartbeat=0)
        self.addCleanup(harness.close_connection, stuck, 1.0)
        stuck.channel().basic_consume(queue, lambda *args: None)
        t0 = time.monotonic()
        proxy.signal(signal.SIGTERM)
        # From here on the client reads nothing, as if busy with one message.
        code = proxy.wait_exit(12.0)
        elapsed = time.monotonic() - t0
        self.assertEqual(code, 0,
                         f"exit code (None: still running {elapsed:.1f} s after SIGTERM with "
                         "shutdown.grace 2s; it waits for a connection.close-ok that never "
                         "comes)")

    # ------------------------------------------------------------ 7. JSON logs

    def test_7_json_logs_without_bodies_or_passwords(self):
        if harness.RABBITMQCTL is None:
            self.skipTest("NACKGUARD_TEST_RABBITMQCTL is not set")
        queue = self.queue_name("logs")
        secret = "S3cret-" + uuid.uuid4().hex
        wrong = "Wr0ng-" + uuid.uuid4().hex
        user = "nackguard-ops-logs"
        ops.add_user(user, secret)
        self.addCleanup(lambda: harness.rabbitmqctl("delete_user", user))
        proxy = self.start_ops({"q.yaml": immediate_policy(queue, max_redeliveries=1)},
                               config={"log": {"level": "debug", "format": "json"}})
        self.broker.declare(queue)
        body_mark = "BodyMark-" + uuid.uuid4().hex
        by_id = "poison-" + uuid.uuid4().hex
        poison_a = f"{body_mark}-a"
        poison_b = f"{body_mark}-b"  # no message_id: identified by a hash of the body
        messages = [(f"{body_mark}-good-{i}".encode(), props(message_id=f"good-{i}"))
                    for i in range(5)]
        messages.insert(2, (poison_a.encode(), props(message_id=by_id)))
        messages.append((poison_b.encode(), props()))
        self.broker.publish(queue, messages)

        with self.assertRaises(AMQPConnectionError):
            harness.connect(proxy.port, credentials=pika.PlainCredentials(user, wrong))
        consumer = self.consumer(
            proxy, queue, lambda d: "nack" if d.label in (poison_a, poison_b) else "ack",
            credentials=pika.PlainCredentials(user, secret))
        self.assertTrue(rs.poll_until([consumer], lambda: self.dlq_count(queue) >= 2, timeout=15,
                                      quiet=0.3), "the poisons were not dead-lettered")
        self.assertTrue(consumer.close())
        self.assertEqual(proxy.stop(), 0)

        records = ops.log_json_lines(proxy.full_log())
        self.assertGreater(len(records), 3)
        for n, record in enumerate(records, start=1):
            self.assertTrue({"time", "level", "msg"} <= set(record),
                            f"log line {n} lacks time, level or msg: {record}")
            self.assertRegex(record["time"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
            self.assertIn(record["level"], ("trace", "debug", "info", "warning", "error",
                                            "critical"))
            self.assertIsInstance(record["msg"], str)
        self.assertTrue(any(r["level"] == "debug" for r in records), "no debug line at debug")
        dead = [r for r in records if "dead-lettered" in r["msg"]]
        self.assertEqual(len(dead), 2, f"dead-lettered lines: {dead}")
        by_identity = [r for r in dead if f"identity=message_id:{by_id} " in r["msg"]]
        self.assertEqual(len(by_identity), 1, f"dead-lettered lines: {dead}")
        self.assertRegex(by_identity[0]["msg"],
                         rf"^dead-lettered: queue={re.escape(queue)} "
                         rf"identity=message_id:{re.escape(by_id)} returns=2 "
                         r"reason=max_redeliveries id=[0-9a-f]{12}$")
        self.assertEqual(by_identity[0]["level"], "warning")
        by_body = [r for r in dead if r is not by_identity[0]][0]
        self.assertRegex(by_body["msg"], rf"^dead-lettered: queue={re.escape(queue)} "
                                         r"identity=body:\S+ returns=2 reason=max_redeliveries "
                                         r"id=[0-9a-f]{12}$")
        raw = proxy.full_log_bytes() + proxy.stdout_text().encode()
        self.assertNotIn(body_mark.encode(), raw, "a message body is in the log")
        self.assertNotIn(secret.encode(), raw, "the password is in the log")
        self.assertNotIn(wrong.encode(), raw, "a wrong password is in the log")
        self.assertEqual(proxy.stdout_text(), "", "nackguard wrote to stdout")

    def test_7b_json_logs_stay_json_for_any_message_id(self):
        """An AMQP shortstr is arbitrary bytes: a message_id that is not UTF-8, or holds a
        quote, a backslash or a newline, still gives one valid JSON object (UTF-8) per line."""
        queue = self.queue_name("logs-bytes")
        proxy = self.start_ops({"q.yaml": immediate_policy(queue, max_redeliveries=1)},
                               config={"log": {"format": "json"}})
        self.broker.declare(queue)
        odd_ids = [b'quote-"-backslash-\\-newline-\n-tab-\t-end',
                   b"latin1-caf\xe9-bytes-\xff\xfe-end"]
        self.broker.publish(queue, [(f"odd-{i}".encode(), props(message_id=mid))
                                    for i, mid in enumerate(odd_ids)])
        consumer = self.consumer(proxy, queue, lambda d: "nack")
        self.assertTrue(rs.poll_until([consumer], lambda: self.dlq_count(queue) >= 2, timeout=15,
                                      quiet=0.3), "the messages were not dead-lettered")
        self.assertTrue(consumer.close())
        self.assertEqual(proxy.stop(), 0)
        raw = proxy.full_log_bytes()
        records = []
        for n, line in enumerate(raw.split(b"\n")[:-1], start=1):
            with self.subTest(line=n):
                try:
                    text = line.decode("utf-8")
                except UnicodeDecodeError as exc:
                    self.fail(f"log line {n} is not UTF-8 ({exc}), so not JSON (RFC 8259 "
                              f"section 8.1): {line!r}")
                records.extend(ops.log_json_lines(text))
        dead = [r["msg"] for r in records if r["msg"].startswith("dead-lettered:")]
        # Each ends with the message's short id (as /status shows it), left out below.
        self.assertTrue(all(re.search(r" id=[0-9a-f]{12}$", d) for d in dead), dead)
        dead = [re.sub(r" id=[0-9a-f]{12}$", "", d) for d in dead]
        # Control characters from a client are written as \xNN: a message id cannot split or
        # forge a log line; bytes that are not UTF-8 become U+FFFD.
        self.assertIn(f"dead-lettered: queue={queue} identity=message_id:"
                      'quote-"-backslash-\\-newline-\\x0a-tab-\\x09-end returns=2 '
                      "reason=max_redeliveries", dead)
        self.assertIn(f"dead-lettered: queue={queue} identity=message_id:"
                      "latin1-caf\ufffd-bytes-\ufffd\ufffd-end returns=2 "
                      "reason=max_redeliveries", dead)

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

        # 100 slow clients, each sending one byte of a request per second.
        slow = []
        for _ in range(100):
            s = socket.create_connection(("127.0.0.1", port), timeout=2)
            slow.append(s)
        stop = threading.Event()
        request = b"GET /metrics HTTP/1.1\r\nHost: slow\r\n\r\n"

        def trickle():
            i = 0
            while not stop.is_set() and i < len(request):
                for s in slow:
                    try:
                        s.send(request[i:i + 1])
                    except OSError:
                        pass
                i += 1
                stop.wait(1.0)

        thread = threading.Thread(target=trickle, daemon=True)
        thread.start()

        def close_slow():
            stop.set()
            thread.join(5)
            for s in slow:
                s.close()
        self.addCleanup(close_slow)
        time.sleep(1.5)
        outcomes = []
        for _ in range(3):
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
            time.sleep(0.5)
        close_slow()
        t0 = time.monotonic()
        answered = None
        while time.monotonic() - t0 < 2.0:
            try:
                answered = proxy.get("/healthz", timeout=1)[::2]
                if answered == (200, "ok\n"):
                    break
            except (OSError, http.client.HTTPException):
                time.sleep(0.05)
        self.assertEqual(answered, (200, "ok\n"),
                         f"/healthz within 2 s after the slow clients left (scrapes during: "
                         f"{outcomes})")
        self.assertEqual(proxy.get("/metrics")[0], 200)
        self.assert_proxy_alive(proxy)


if __name__ == "__main__":
    unittest.main()
