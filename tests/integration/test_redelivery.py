# ctest-variants: quorum rmq40 rmq40.quorum rmq43 rmq43.quorum
"""nackguard bounds redeliveries of poison messages, end to end against a real RabbitMQ.

Every test starts its own proxy process(es) with its own policy file for its own queue,
publishes directly to the broker with confirms, and consumes with pika through the proxy.
The queues are of NACKGUARD_TEST_QUEUE_TYPE (harness.py): classic, declared directly on
the broker, or quorum (durable, x-queue-type quorum), declared through the proxy as an
application would, so that the proxy knows the type of the queue it declares a DLQ or delay
queues for. CTest runs the module on both queue types and both broker versions
(integration.test_redelivery, .quorum, .rmq40, .rmq40.quorum; tests/integration/CMakeLists.txt).
The headers a quorum queue or RabbitMQ 4.x adds to a delivery (x-delivery-count) are not
part of "the original headers" below. What is proven, with exact counts:

(a) nack(requeue=True) of a poison identified by message_id, max_redeliveries 5: the poison
    is delivered exactly 6 times, then sits in <queue>.dlq with x-nackguard-reason
    max_redeliveries, x-nackguard-returns 6, x-nackguard-queue, x-original-exchange "",
    x-original-routingKey <queue> and first/last-return timestamps, its body and every
    other property unchanged, the DLQ durable; the 99 good messages are delivered and
    acked exactly once, none reaches the DLQ, and the queue ends empty.
(b) the same with basic.reject(requeue=True) and a Celery protocol-2 message (no
    message_id; task id in header `id` and in correlation_id): identity header:id.
(c) the same with no identity at all: the body hash identifies the message.
(d) a consumer PROCESS that dies (os._exit) on the poison, restarted each time, prefetch 10:
    the poison is handed out exactly 6 times, then dead-lettered with reason crash_loop;
    every one of the 99 innocent messages is acked, none is dead-lettered.
(e) requeue: delayed, backoff 1s x2 capped at 4s, no jitter, max_redeliveries 3: the gaps
    between deliveries are 1s, 2s, 4s; the copies come back through
    nackguard.delay.<queue>.{1000,2000,4000}ms with body and properties byte-exact and
    x-nackguard-returns 1, 2, 3; the 4th nack dead-letters it (returns 4).
(f) an outage (every message nacked for 5 s, then all acked): nothing is dead-lettered,
    each of the 50 messages is acked exactly once, "outage started" is logged.
(g) basic.nack(multiple=True) over poison deliveries only, and over good ones too: both
    poisons are delivered exactly 6 times and dead-lettered, every good message is acked
    exactly once (and, when covered by the multiple nack, delivered exactly twice), no
    channel error.
(h) two proxy processes in front of one queue, delayed 200ms, max_redeliveries 4: the count
    travels in x-nackguard-returns, so the poison is delivered exactly 5 times in total
    across both consumers and is in the DLQ exactly once.
(i) a user without configure permission (so the proxy cannot declare the DLQ): the proxy
    falls back to forwarding the nack (logs "fallback: queue=<q> cause=republish_failed"),
    the poison is never lost (exactly one copy remains), the good messages are all acked;
    and (subtest) the fallback behaves as without the proxy: the poison keeps coming back to
    the consumer, with at most one fallback per return by the consumer.
(j) dead_letter via: reject: after 6 deliveries the poison reaches the queue's own
    dead-letter exchange with the broker's x-death (reason rejected), no <queue>.dlq exists.
"""

import time
import unittest
import uuid

import pika

import harness
import redelivery_scenarios as scenarios
import redelivery_support as rs
from redelivery_scenarios import GOODS, POISON, typed_headers
from redelivery_support import NO_RATE_LIMITS, props


class RedeliveryGuardTest(scenarios.RedeliveryScenarioTest):

    # ------------------------------------------------------------ (a) (b) (c)

    def test_a_nack_poison_by_message_id(self):
        queue = self.queue_name("a")
        proxy = self.start_guard(self.immediate_policy(queue))
        self.declare_source(proxy, queue)
        poison_props = props(
            message_id="poison-" + uuid.uuid4().hex, content_type="application/json",
            content_encoding="utf-8", delivery_mode=2, priority=3,
            correlation_id="corr-" + uuid.uuid4().hex, reply_to="replies", type="order",
            app_id="it", timestamp=int(time.time()) - 100, user_id="guest",
            headers={"custom": "value", "n": 7, "flag": True, "nested": {"k": "v"}})
        self.publish_mix(queue, poison_props,
                         lambda label: props(message_id=f"mid-{label}", delivery_mode=2))
        self.run_poison_loop(queue, proxy, "nack", poison_props,
                             "message_id:" + poison_props.message_id)

    def test_b_reject_celery_header_id(self):
        queue = self.queue_name("b")
        proxy = self.start_guard(self.immediate_policy(queue))
        self.declare_source(proxy, queue)

        def celery(task_id):
            return props(content_type="application/json", content_encoding="utf-8",
                         correlation_id=task_id, delivery_mode=2, priority=0,
                         headers={"lang": "py", "task": "x", "id": task_id, "retries": 0,
                                  "root_id": task_id, "parent_id": None})

        poison_id = str(uuid.uuid4())
        poison_props = celery(poison_id)
        self.publish_mix(queue, poison_props, lambda label: celery(str(uuid.uuid4())))
        self.run_poison_loop(queue, proxy, "reject", poison_props, f"header:id:{poison_id}")

    def test_c_no_identity_body_hash(self):
        queue = self.queue_name("c")
        proxy = self.start_guard(self.immediate_policy(queue))
        self.declare_source(proxy, queue)
        poison_props = props()
        self.publish_mix(queue, poison_props, lambda label: props())
        self.run_poison_loop(queue, proxy, "nack", poison_props, "body:")

    # ------------------------------------------------------------ (d) crash loop

    def test_d_crash_loop_consumer_process(self):
        queue = self.queue_name("d")
        proxy = self.start_guard(self.immediate_policy(queue))
        self.declare_source(proxy, queue)
        poison_props = props(message_id="poison-" + uuid.uuid4().hex, delivery_mode=2)
        self.publish_mix(queue, poison_props,
                         lambda label: props(message_id=f"mid-{label}", delivery_mode=2))
        t_start = time.time()
        exit_codes, events, last_stderr = self.run_crash_consumers(proxy, queue)
        t_end = time.time()
        self.assertEqual(exit_codes[-1], 0, f"the last consumer did not idle out: {exit_codes}; "
                                            f"stderr: {last_stderr[-2000:]}")
        self.assertEqual(exit_codes, [rs.CRASH_EXIT_CODE] * 6 + [0],
                         "child exit codes: 6 crashes, then a consumer that idles out")
        poison_deliveries = [e for e in events if e[0] == "deliver" and e[1] == POISON]
        self.assertEqual(len(poison_deliveries), 6, "poison deliveries (max_redeliveries 5)")
        acked = {e[1] for e in events if e[0] == "ack"}
        self.assertEqual(sorted(acked), sorted(GOODS), "innocent messages acked")

        dlq = self.broker.get_all(f"{queue}.dlq")
        self.assertEqual([m[2] for m in dlq], [POISON.encode()], "DLQ contents")
        self.check_dead_letter_copy(queue, dlq[0], poison_props, POISON.encode(), 6,
                                    "crash_loop", t_start, t_end)
        self.assertEqual(self.broker.message_count(queue), 0, "the queue is not empty")
        self.check_dead_lettered_log(proxy, queue, "message_id:" + poison_props.message_id,
                                     6, "crash_loop")
        self.assertEqual(proxy.log_lines(f"fallback: queue={queue}"), [])
        self.assert_proxy_alive(proxy)

    # ------------------------------------------------------------ (e) delayed requeue

    def test_e_delayed_backoff_keeps_properties(self):
        queue = self.queue_name("e", delay_ttls_ms=(1000, 2000, 4000))
        proxy = self.start_guard({"q.yaml": rs.policy_yaml(
            queue, max_redeliveries=3, requeue="delayed",
            backoff={"initial": "1s", "multiplier": 2, "max": "4s", "jitter": "none"},
            rate=NO_RATE_LIMITS)})
        self.declare_source(proxy, queue)
        published = props(
            message_id="poison-" + uuid.uuid4().hex, content_type="application/octet-stream",
            content_encoding="binary", delivery_mode=2, priority=7,
            correlation_id="corr-" + uuid.uuid4().hex, reply_to="replies-e",
            type="blob", app_id="it-e", timestamp=1700000000, user_id="guest",
            headers={"custom": "keep-me", "count": 3, "big": 2 ** 40, "flag": False,
                     "list": [1, "two", True], "table": {"a": 1}, "bytes": b"\x00\xff"})
        body = bytes(range(256)) * 4 + b"\x00end"
        self.broker.publish(queue, [(body, published)])
        t_start = time.time()
        consumer = self.consumer(proxy, queue, lambda d: "nack", prefetch=10)
        done = rs.poll_until([consumer], lambda: self.dlq_count(queue) >= 1, timeout=30,
                             quiet=1.0)
        t_end = time.time()
        self.assertTrue(done, f"not dead-lettered in 30 s; {consumer.delivered()} deliveries")
        deliveries = consumer.deliveries
        self.assertEqual(len(deliveries), 4, "deliveries (max_redeliveries 3)")
        gaps = [b.time - a.time for a, b in zip(deliveries, deliveries[1:])]
        for gap, want in zip(gaps, (1.0, 2.0, 4.0)):
            self.assertTrue(0.9 * want <= gap <= want + 1.5,
                            f"gaps {[round(g, 3) for g in gaps]} not within [0.9*d, d+1.5] of "
                            "1, 2, 4 s")
        expected = rs.as_received(published)
        for n, d in enumerate(deliveries):
            self.assertEqual(d.body, body, f"delivery {n + 1}: body changed")
            self.assertEqual(rs.properties_except_headers(d.props),
                             rs.properties_except_headers(expected),
                             f"delivery {n + 1}: a property changed")
            # Only the first delivery is the published message itself; the others are copies
            # the broker dead-lettered back from a delay queue (it sorts their headers).
            ordered = n == 0 and rs.broker_keeps_header_order(redelivered=False)
            self.assertEqual(typed_headers(rs.strip_headers(d.props.headers), ordered),
                             typed_headers(expected.headers, ordered),
                             f"delivery {n + 1}: the original headers changed")
            self.assertEqual((d.exchange, d.routing_key), ("", queue))
            returns = (d.props.headers or {}).get("x-nackguard-returns")
            self.assertEqual(returns, None if n == 0 else n, f"delivery {n + 1}: returns header")
        for ttl in (1000, 2000, 4000):
            self.assertTrue(self.broker.exists(f"nackguard.delay.{queue}.{ttl}ms"),
                            f"delay queue nackguard.delay.{queue}.{ttl}ms missing")
            self.assertEqual(self.broker.message_count(f"nackguard.delay.{queue}.{ttl}ms"), 0)
        self.assertTrue(consumer.close())
        dlq = self.broker.get_all(f"{queue}.dlq")
        self.assertEqual([m[2] for m in dlq], [body], "DLQ contents")
        self.check_dead_letter_copy(queue, dlq[0], published, body, 4, "max_redeliveries",
                                    t_start, t_end, header_order=False)
        self.assertEqual(self.broker.message_count(queue), 0)
        self.check_dead_lettered_log(proxy, queue, "message_id:" + published.message_id, 4,
                                     "max_redeliveries")
        self.assertEqual(proxy.log_lines(f"fallback: queue={queue}"), [])

    # ------------------------------------------------------------ (f) outage

    def test_f_outage_dead_letters_nothing(self):
        queue = self.queue_name("f", delay_ttls_ms=(1000,))
        proxy = self.start_guard({"q.yaml": rs.policy_yaml(
            queue, max_redeliveries=2, requeue="immediate",
            backoff={"initial": "1s", "multiplier": 1, "max": "1s", "jitter": "none"},
            # Messages, not deliveries (issue 12): with immediate requeue the consumer cycles
            # through its 10 prefetched messages only, so the minimum is the prefetch.
            rate={"window": "10s", "per_message": 1000, "outage_ratio": 0.5,
                  "min_messages": 10})})
        self.declare_source(proxy, queue)
        labels = [f"msg-{i:02d}" for i in range(50)]
        self.broker.publish(queue, [(label.encode(), props(message_id=f"mid-{label}"))
                                    for label in labels])
        failing_until = time.monotonic() + 5.0
        consumer = self.consumer(
            proxy, queue, lambda d: "nack" if d.time < failing_until else "ack", prefetch=10)
        done = rs.poll_until([consumer], lambda: sum(consumer.acks.values()) >= 50, timeout=40,
                             quiet=1.5)
        self.assertTrue(done, f"only {sum(consumer.acks.values())} of 50 acked in 40 s")
        self.assertEqual(sorted(consumer.acks), labels)
        self.assertEqual(set(consumer.acks.values()), {1}, "some message was acked twice")
        self.assertEqual(sum(consumer.acks.values()), 50)
        self.assertGreater(sum(consumer.returns.values()), 50, "the outage phase nacked little")
        self.assertTrue(consumer.close())
        self.assertIn(self.broker.message_count(f"{queue}.dlq"), (None, 0), "DLQ not empty")
        self.assertEqual(self.broker.message_count(queue), 0)
        self.assertIn(self.broker.message_count(f"nackguard.delay.{queue}.1000ms"), (None, 0))
        self.assertGreaterEqual(len(proxy.log_lines(f"outage started: queue={queue} ")), 1,
                                "no 'outage started' line for the queue")
        self.assertEqual(proxy.log_lines(f"dead-lettered: queue={queue} "), [])
        self.assertEqual(proxy.log_lines(f"fallback: queue={queue}"), [])

    # ------------------------------------------------------------ (g) multiple nack

    def test_g1_multiple_nack_over_poison_only(self):
        self.run_multiple_nack(cover_goods=False)

    def test_g2_multiple_nack_covering_good_messages(self):
        self.run_multiple_nack(cover_goods=True)

    # ------------------------------------------------------------ (h) two proxies

    def test_h_two_proxies_share_the_count(self):
        queue = self.queue_name("h", delay_ttls_ms=(200,))
        policy = {"q.yaml": rs.policy_yaml(
            queue, max_redeliveries=4, requeue="delayed",
            backoff={"initial": "200ms", "multiplier": 1, "max": "200ms", "jitter": "none"},
            rate=NO_RATE_LIMITS)}
        proxy_a = self.start_guard(policy, name="h-proxy-a")
        proxy_b = self.start_guard(policy, name="h-proxy-b")
        self.declare_source([proxy_a, proxy_b], queue)  # each consumer's app declares it
        goods = [f"good-{i}" for i in range(10)]
        messages = [(l.encode(), props(message_id=f"mid-{l}")) for l in goods]
        messages.insert(3, (POISON.encode(), props(message_id="poison-" + uuid.uuid4().hex)))
        self.broker.publish(queue, messages)
        decide = lambda d: "nack" if d.label == POISON else "ack"  # noqa: E731
        a = self.consumer(proxy_a, queue, decide, prefetch=10, name="a")
        b = self.consumer(proxy_b, queue, decide, prefetch=10, name="b")
        done = rs.poll_until([a, b], lambda: self.dlq_count(queue) >= 1 and
                             sum(a.acks.values()) + sum(b.acks.values()) >= 10,
                             timeout=30, quiet=1.5)
        per_consumer = (a.delivered(POISON), b.delivered(POISON))
        self.assertTrue(done, f"not done in 30 s; poison deliveries (a, b) {per_consumer}")
        self.assertEqual(sum(per_consumer), 5,
                         f"poison deliveries in total (a, b) = {per_consumer}")
        for g in goods:
            self.assertEqual(a.acks[g] + b.acks[g], 1, f"{g} acks")
        self.assertTrue(a.close())
        self.assertTrue(b.close())
        dlq = self.broker.get_all(f"{queue}.dlq")
        self.assertEqual([m[2] for m in dlq], [POISON.encode()], "DLQ contents")
        self.assertEqual(dlq[0][1].headers.get("x-nackguard-returns"), 5)
        self.assertEqual(self.broker.message_count(queue), 0)
        lines = (proxy_a.log_lines(f"dead-lettered: queue={queue} ") +
                 proxy_b.log_lines(f"dead-lettered: queue={queue} "))
        self.assertEqual(len(lines), 1, f"dead-lettered lines: {lines}")
        self.assertIn(" returns=5 reason=max_redeliveries", lines[0])

    # ------------------------------------------------------------ (i) no permission for the DLQ

    def test_i_no_configure_permission_falls_back(self):
        if harness.RABBITMQCTL is None:
            self.skipTest("NACKGUARD_TEST_RABBITMQCTL is not set")
        queue = self.queue_name("i")
        # rabbitmqctl is slow (seconds per call on a loaded machine): as few calls as possible.
        # The user's name is this run's own: the variants of this module may run at the same
        # time against one node (ctest -j2).
        user = f"nackguard-it-limited-{uuid.uuid4().hex[:8]}"
        harness.rabbitmqctl("add_user", user, "limited")  # no tags
        self.addCleanup(lambda: harness.rabbitmqctl("delete_user", user))
        harness.rabbitmqctl("set_permissions", "-p", "/", user, "^$", ".*", ".*")
        proxy = self.start_guard(self.immediate_policy(queue, max_redeliveries=2))
        self.declare_source(proxy, queue)
        poison_props = props(message_id="poison-" + uuid.uuid4().hex, delivery_mode=2)
        self.publish_mix(queue, poison_props, lambda label: props(message_id=f"mid-{label}"))
        consumer = self.consumer(
            proxy, queue, lambda d: "nack" if d.label == POISON else "ack", prefetch=10,
            credentials=pika.PlainCredentials(user, "limited"))
        rs.poll_until([consumer], lambda: False, timeout=3.0)
        self.assertTrue(consumer.ch.is_open and consumer.conn.is_open,
                        "the consumer's channel or connection was closed")
        poison_deliveries = consumer.delivered(POISON)
        poison_returns = consumer.returns[POISON]
        for label in GOODS:
            self.assertEqual(consumer.acks[label], 1, f"{label} acks")
        self.assertTrue(consumer.close())
        # The poison the consumer held goes back when its connection closes, and a quorum queue
        # applies that return a moment later (4.0 in CI: the queue read empty once).
        harness.wait_message_count(self.broker._channel(), queue, 1, timeout=10)
        in_queue = self.broker.get_all(queue)
        in_dlq = self.broker.get_all(f"{queue}.dlq")
        self.assertEqual([m[2] for m in in_queue], [POISON.encode()],
                         f"the original queue should hold exactly the poison (delivered "
                         f"{poison_deliveries} times; DLQ: {[m[2] for m in in_dlq]})")
        self.assertEqual(len(in_queue) + len(in_dlq), 1, "poison copies (queue + DLQ)")
        self.assertIsNone(self.broker.message_count(f"{queue}.dlq"),
                          "the DLQ exists though the user may not declare it")
        fallbacks = proxy.log_lines(f"fallback: queue={queue} cause=republish_failed")
        self.assertGreaterEqual(len(fallbacks), 1, "no republish_failed fallback logged")
        self.assertEqual(proxy.log_lines(f"dead-lettered: queue={queue} "), [])
        self.assert_proxy_alive(proxy)
        # A fallback forwards the consumer's requeue unchanged, i.e. behaves as without the
        # proxy: the poison keeps coming back to the consumer (it is not spun between the
        # proxy and the broker out of the consumer's sight), one fallback per return.
        with self.subTest("the fallback hands the poison back to the consumer"):
            self.assertGreater(poison_deliveries, 3 + 1,
                               f"the consumer got the poison {poison_deliveries} times in 3 s "
                               f"(max_redeliveries 2); the proxy logged {len(fallbacks)} "
                               "fallbacks for it")
            # Return 1 is forwarded and return 2 republished (a copy to the queue itself
            # needs no configure permission); return 3 would be dead-lettered, the DLQ's
            # declare is refused, and from then on each return falls back: one fallback for
            # each (the log says it once, with a count of lines suppressed).
            page = proxy.metrics()
            returns = page.value("nackguard_returns_total", queue=queue)
            self.assertGreaterEqual(returns, poison_returns)
            by_cause = {labels["cause"]: value
                        for labels, value in page.series("nackguard_fallbacks_total")
                        if labels["queue"] == queue and value}
            self.assertEqual(by_cause, {"republish_failed": returns - 2},
                             f"fallbacks for {returns} returns")

    # ------------------------------------------------------------ (j) via reject

    def test_j_dead_letter_via_reject_to_dlx(self):
        queue = self.queue_name("j")
        exchange = f"{queue}.dlx"
        target = f"{queue}.dlx-target"
        self.cleanup_queues(target)
        self.addCleanup(self.delete_exchange, exchange)
        proxy = self.start_guard(self.immediate_policy(
            queue, dead_letter={"via": "reject"}))
        ch = self.broker.ch
        ch.exchange_declare(exchange, exchange_type="fanout")
        self.broker.declare(target)
        ch.queue_bind(target, exchange)
        self.declare_source(proxy, queue, arguments={"x-dead-letter-exchange": exchange})
        poison_props = props(message_id="poison-" + uuid.uuid4().hex, headers={"custom": "v"})
        goods = [f"good-{i}" for i in range(9)]
        messages = [(l.encode(), props(message_id=f"mid-{l}")) for l in goods]
        messages.insert(4, (POISON.encode(), poison_props))
        self.broker.publish(queue, messages)
        consumer = self.consumer(proxy, queue,
                                 lambda d: "nack" if d.label == POISON else "ack", prefetch=10)
        done = rs.poll_until([consumer], lambda: (self.broker.message_count(target) or 0) >= 1
                             and sum(consumer.acks.values()) >= 9, timeout=30, quiet=1.0)
        self.assertTrue(done, f"not done in 30 s; {consumer.delivered(POISON)} poison deliveries")
        self.assertEqual(consumer.delivered(POISON), 6, "poison deliveries (max_redeliveries 5)")
        for g in goods:
            self.assertEqual(consumer.acks[g], 1, f"{g} acks")
        self.assertTrue(consumer.close())
        dead = self.broker.get_all(target)
        self.assertEqual([m[2] for m in dead], [POISON.encode()], "DLX target contents")
        headers = dead[0][1].headers or {}
        deaths = headers.get("x-death")
        self.assertIsInstance(deaths, list, f"x-death: {deaths!r}")
        self.assertEqual(len(deaths), 1, f"x-death: {deaths!r}")
        self.assertEqual(deaths[0].get("reason"), "rejected")
        self.assertEqual(deaths[0].get("queue"), queue)
        self.assertEqual(deaths[0].get("count"), 1)
        self.assertEqual(headers.get("custom"), "v")
        self.assertEqual(dead[0][1].message_id, poison_props.message_id)
        self.assertIsNone(self.broker.message_count(f"{queue}.dlq"), f"{queue}.dlq exists")
        self.assertEqual(self.broker.message_count(queue), 0)
        self.check_dead_lettered_log(proxy, queue, "message_id:" + poison_props.message_id, 6,
                                     "max_redeliveries")
        self.assertEqual(proxy.log_lines(f"fallback: queue={queue}"), [])


if __name__ == "__main__":
    unittest.main()
