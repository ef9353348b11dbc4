"""Quorum queues through nackguard, against a real RabbitMQ: 3.10.8 (integration.test_quorum),
4.0.5 (.rmq40) and 4.3.6 (.rmq43). Every queue here is a quorum queue, declared through the
proxy as an application would, with no dead-letter exchange: a message the broker's own
delivery limit ended would be gone. What is proven, with exact counts:

(a) the broker's limit never drops a message: max_redeliveries 30 on a quorum queue without
    x-delivery-limit (RabbitMQ 4.x gives it a limit of 20, 3.10 none; a RabbitMQ policy may
    set one nackguard cannot see, so it assumes the tightest, kAssumedBrokerLimit): the poison
    is delivered exactly 31 times, then it is in <queue>.dlq (reason max_redeliveries, returns
    31). No delivery the consumer got carried an x-delivery-count: each redelivery with one was
    republished, with its count, to the back of its queue first. On 3.10 and 4.0 every requeue
    counts in x-delivery-count, so each of the 30 returns came back that way; on 4.3 a nack
    does not, and a return is republished at the return instead when the message's redelivered
    flag already carries one: 15 of 30.
(b) the same with x-delivery-limit 4 declared through the proxy and max_redeliveries 10:
    exactly 11 deliveries, then the DLQ; 10 republishes (5 on 4.3).
(c) crash attribution: a consumer process that dies on the poison, prefetch 10,
    max_redeliveries 3, 29 innocent messages: the poison is handed out exactly 4 times and
    dead-lettered (crash_loop), every innocent message is acked and none is in the DLQ, though
    the broker's x-delivery-count of the innocent messages passes 3. Three rounds: the broker's
    counts depend on timing.
(d) what nackguard declares for a quorum queue is a quorum queue: the delay queue (with
    at-least-once dead-lettering and reject-publish, and no x-expires: a quorum queue's is not
    renewed by a redeclare, and would delete the copies in it) and the DLQ, which on 4.0 has
    no delivery limit (x-delivery-limit -1): its dead letter survives 25 gets and requeues, as
    replay dry runs do; `queue_type: classic` in the policy gives a classic DLQ.
(e) a delay queue that already exists with other arguments is used as it is, and said once in
    the log: the copy still comes back through it.
(f) 4.3 only (80 s): 20 messages nacked for ever under a 1 s delay keep going round past the
    delay queue's first minute, and all 20 are in the queue at the end.
"""

import time
import uuid

import harness
import redelivery_scenarios as scenarios
import redelivery_support as rs
from redelivery_support import NO_RATE_LIMITS, props

POISON = "poison"


class QuorumQueueTest(scenarios.RedeliveryScenarioTest):

    def policy(self, queue, max_redeliveries, **kwargs):
        kwargs.setdefault("rate", NO_RATE_LIMITS)
        return {"q.yaml": rs.policy_yaml(queue, max_redeliveries=max_redeliveries, **kwargs)}

    def declare_quorum(self, proxy, queue, arguments=None):
        conn = harness.connect(proxy.port)
        try:
            harness.declare_queue(conn.channel(), queue, arguments=arguments,
                                  queue_type="quorum")
        finally:
            harness.close_connection(conn)

    def queue_info(self, name):
        """(type, arguments text) of a queue, from rabbitmqctl."""
        out = harness.rabbitmqctl("list_queues", "-q", "--no-table-headers", "name", "type",
                                  "arguments")
        for line in out.splitlines():
            fields = line.split("\t")
            if fields and fields[0] == name:
                return fields[1], "\t".join(fields[2:])
        self.fail(f"queue {name} not found in rabbitmqctl list_queues:\n{out}")

    def look_and_put_back(self, queue, times):
        """basic.get and nack(requeue=true) of the queue's head, as a replay dry run does;
        returns how many times a message was there to take."""
        conn = harness.connect(harness.BROKER_PORT)
        try:
            channel = conn.channel()
            for look in range(times):
                method, _props, _body = channel.basic_get(queue, auto_ack=False)
                if method is None:
                    return look
                channel.basic_nack(method.delivery_tag, requeue=True)
            return times
        finally:
            harness.close_connection(conn)

    # ------------------------------------------------------------ (a), (b) the broker's limit

    def nack_loop(self, queue, proxy, goods=5):
        """Publishes `goods` good messages and the poison, nacks the poison for ever, acks the
        rest; returns the consumer once the poison is in the DLQ."""
        messages = [(f"good-{i}".encode(), props(message_id=f"good-{i}")) for i in range(goods)]
        messages.insert(goods // 2, (POISON.encode(), props(message_id="poison-" +
                                                             uuid.uuid4().hex)))
        self.broker.publish(queue, messages)
        consumer = self.consumer(proxy, queue,
                                 lambda d: "nack" if d.label == POISON else "ack", prefetch=10)
        done = rs.poll_until(
            [consumer],
            lambda: sum(consumer.acks.values()) >= goods and
            (self.broker.message_count(f"{queue}.dlq") or 0) >= 1,
            timeout=60, quiet=1.0)
        self.assertTrue(done, f"poison delivered {consumer.delivered(POISON)} times, "
                              f"DLQ {self.broker.message_count(f'{queue}.dlq')}; proxy log:\n"
                              f"{proxy.log_text()}")
        self.assertEqual(sorted(consumer.acks.values()), [1] * goods)
        self.assertEqual(self.broker.message_count(queue), 0, "the queue ends empty")
        return consumer

    def check_dlq(self, queue, returns, reason):
        copies = self.broker.get_all(f"{queue}.dlq")
        self.assertEqual(len(copies), 1, "exactly one copy of the poison in the DLQ")
        _, p, body = copies[0]
        self.assertEqual(body, POISON.encode())
        self.assertEqual(p.headers.get("x-nackguard-reason"), reason)
        self.assertEqual(p.headers.get("x-nackguard-returns"), returns)

    def test_a_default_broker_limit_never_drops_the_message(self):
        queue = self.queue_name("qa")
        proxy = self.start_guard(self.policy(queue, 30))
        self.declare_quorum(proxy, queue)
        consumer = self.nack_loop(queue, proxy)
        self.assertEqual(consumer.delivered(POISON), 31, "max_redeliveries + 1 deliveries")
        self.check_dlq(queue, 31, "max_redeliveries")
        # 4.3 counts no nack: the first return is forwarded (its flag carries it), and every
        # later one is a copy (a quorum queue's copies are exact). Before 4.3 the redelivery
        # after the forwarded one carries x-delivery-count 1: republished at delivery too.
        republished = 29 if not harness.broker_counts_nacks() else 30
        self.assertEqual(proxy.metrics().value("nackguard_requeues_total", queue=queue,
                                     action="republished"), republished)
        # No delivery reached the consumer with a count of the broker's: one return of it,
        # and one the consumer never sees (a requeue crossing its cancel), could pass a limit
        # of 2 set by a policy nackguard cannot see.
        counts = [d.props.headers.get("x-delivery-count", 0) for d in consumer.deliveries
                  if d.label == POISON and d.props.headers]
        self.assertEqual([c for c in counts if c], [])

    def test_b_declared_limit_below_the_policy(self):
        queue = self.queue_name("qb")
        proxy = self.start_guard(self.policy(queue, 10))
        self.declare_quorum(proxy, queue, arguments={"x-delivery-limit": 4})
        consumer = self.nack_loop(queue, proxy)
        self.assertEqual(consumer.delivered(POISON), 11, "max_redeliveries + 1 deliveries")
        self.check_dlq(queue, 11, "max_redeliveries")
        # A declared limit is only an upper bound (a policy may set a lower one): the assumed
        # one applies, as in (a).
        self.assertEqual(proxy.metrics().value("nackguard_requeues_total", queue=queue,
                                     action="republished"),
                         9 if not harness.broker_counts_nacks() else 10)

    # ------------------------------------------------------------ (c) crash attribution

    def crash_round(self, tag):
        queue = self.queue_name(tag)
        proxy = self.start_guard(self.policy(queue, 3))
        self.declare_quorum(proxy, queue)
        goods = [f"good-{i:02d}" for i in range(29)]
        messages = [(g.encode(), props(message_id=f"mid-{g}", delivery_mode=2)) for g in goods]
        messages.insert(4, (POISON.encode(), props(message_id="poison-" + uuid.uuid4().hex,
                                                   delivery_mode=2)))
        self.broker.publish(queue, messages)
        exit_codes, events, stderr = self.run_crash_consumers(proxy, queue, 10, "1.5")
        self.assertEqual(exit_codes, [rs.CRASH_EXIT_CODE] * 4 + [0],
                         f"4 crashes, then a consumer that idles out; stderr: {stderr}")
        poison_deliveries = [e for e in events if e[0] == "deliver" and e[1] == POISON]
        self.assertEqual(len(poison_deliveries), 4, "poison handed out max_redeliveries + 1")
        self.assertEqual(sorted({e[1] for e in events if e[0] == "ack"}), goods,
                         "every innocent message acked")
        dlq = self.broker.get_all(f"{queue}.dlq")
        self.assertEqual([body for _, _, body in dlq], [POISON.encode()],
                         f"only the poison is dead-lettered; proxy log:\n{proxy.log_text()}")
        self.assertEqual(dlq[0][1].headers.get("x-nackguard-reason"), "crash_loop")
        self.assertEqual(dlq[0][1].headers.get("x-nackguard-returns"), 4)
        self.assertEqual(self.broker.message_count(queue), 0)

    def test_c_crash_attribution_holds_on_quorum_queues(self):
        for round_ in range(3):
            with self.subTest(round=round_):
                self.crash_round(f"qc{round_}")

    # ------------------------------------------------------------ (d), (e) declared queues

    DELAY_1S = {"initial": "1s", "multiplier": 1, "max": "1s", "jitter": "none"}

    def lone_poison(self, policy, queue, before_dlq=None):
        """A proxy with `policy`, `queue` declared through it as a quorum queue, and a poison
        alone in it, nacked until it is in the DLQ; before_dlq() is polled first, if given.
        Returns the proxy and the consumer."""
        proxy = self.start_guard(policy)
        self.declare_quorum(proxy, queue)
        self.broker.publish(queue, [(POISON.encode(), props(message_id="p-" + queue))])
        consumer = self.consumer(proxy, queue, lambda d: "nack")
        if before_dlq is not None:
            self.assertTrue(rs.poll_until([consumer], before_dlq, timeout=10), proxy.log_text())
        self.assertTrue(rs.poll_until(
            [consumer], lambda: (self.broker.message_count(f"{queue}.dlq") or 0) == 1,
            timeout=20), proxy.log_text())
        return proxy, consumer

    def test_d_delay_queue_and_dlq_are_quorum_queues(self):
        queue = self.queue_name("qd", delay_ttls_ms=(1000,))
        delay_queue = f"nackguard.delay.{queue}.1000ms"
        types = {}

        def delay_queue_seen():
            # Looked at while the copy waits in it: it exists only once nackguard declared it.
            if self.broker.exists(delay_queue):
                types["delay"] = self.queue_info(delay_queue)
            return "delay" in types

        _, consumer = self.lone_poison(
            self.policy(queue, 1, requeue="delayed", backoff=self.DELAY_1S), queue,
            before_dlq=delay_queue_seen)
        queue_type, arguments = types["delay"]
        self.assertEqual(queue_type, "quorum")
        self.assertIn("at-least-once", arguments)
        self.assertIn("reject-publish", arguments)
        # A quorum queue's x-expires counts from its declaration (a redeclare does not renew
        # it): it would delete the queue, and the copies waiting in it, after 62 s.
        self.assertNotIn("x-expires", arguments)
        self.assertEqual(consumer.delivered(POISON), 2, "max_redeliveries 1: two deliveries")
        dlq_type, dlq_arguments = self.queue_info(f"{queue}.dlq")
        self.assertEqual(dlq_type, "quorum")
        # 4.x: no delivery limit on the DLQ, or its default of 20 would drop the dead letter
        # after 21 looks by `nackguard replay --dry-run`; 3.x has no default, and -1 there
        # would drop it at its first return.
        if harness.broker_version() >= (4,):
            self.assertIn("x-delivery-limit", dlq_arguments)
            self.assertIn("-1", dlq_arguments)
        else:
            self.assertNotIn("x-delivery-limit", dlq_arguments)
        looks = self.look_and_put_back(f"{queue}.dlq", 25)
        self.assertEqual(looks, 25, "the dead letter left the DLQ while it was put back")
        # The last nack's requeue reaches a quorum queue's count a moment later (a Ra command
        # of its own): a count taken at once read 0 in one CI run.
        self.assertEqual(harness.wait_message_count(self.broker._channel(), f"{queue}.dlq", 1), 1)

    def test_d2_policy_queue_type_classic(self):
        queue = self.queue_name("qd2")
        policy = self.policy(queue, 0)
        policy["q.yaml"] += "queue_type: classic\n"
        self.lone_poison(policy, queue)
        self.assertEqual(self.queue_info(f"{queue}.dlq")[0], "classic")

    def test_e_existing_delay_queue_with_other_arguments_is_used_as_it_is(self):
        queue = self.queue_name("qe", delay_ttls_ms=(1000,))
        delay_queue = f"nackguard.delay.{queue}.1000ms"
        # Made by hand, classic, without x-expires: nackguard's own declaration would differ.
        self.broker.ch.queue_declare(delay_queue, durable=True, arguments={
            "x-message-ttl": 1000, "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": queue})
        proxy, consumer = self.lone_poison(
            self.policy(queue, 2, requeue="delayed", backoff=self.DELAY_1S), queue)
        self.assertEqual(consumer.delivered(POISON), 3, "two delayed copies came back")
        self.assertEqual(self.queue_info(delay_queue)[0], "classic", "used as it was")
        lines = proxy.log_lines(f"queue={delay_queue}: exists with other arguments")
        self.assertEqual(len(lines), 1, proxy.log_text())
        self.assertEqual(proxy.log_lines("fallback:"), [])

    # ------------------------------------------------------------ (f) a delay queue's minute

    def test_f_copies_in_a_delay_queue_outlive_its_first_minute(self):
        # 80 s, so on 4.3 only (the broker users run; 3.10 and 4.0 expire a quorum queue
        # alike, measured by hand).
        if harness.broker_version() < (4, 3):
            self.skipTest("80 s: run on 4.3 only")
        queue = self.queue_name("qf", delay_ttls_ms=(1000,))
        proxy = self.start_guard(
            self.policy(queue, 100000, requeue="delayed", backoff=self.DELAY_1S))
        self.declare_quorum(proxy, queue)
        ids = [f"f-{i}" for i in range(20)]
        self.broker.publish(queue, [(i.encode(), props(message_id=i)) for i in ids])
        consumer = self.consumer(proxy, queue, lambda d: "nack", prefetch=10)
        # Most of the 20 wait in the delay queue at any moment. Past 62 s (2 TTLs + 60 s), the
        # x-expires nackguard gave quorum delay queues deleted the queue with them: 0 of 20
        # were left after 100 s (4.3.6).
        until = time.monotonic() + 75
        rs.poll_until([consumer], lambda: time.monotonic() > until, timeout=80)
        late = {d.label for d in consumer.deliveries if d.time > until - 5}
        self.assertEqual(late, set(ids), "messages delivered in the last 5 s, past 70 s")
        self.assertTrue(consumer.close())
        # The copies come back from the delay queue within its TTL; the consumer's session
        # ends once its last copy is confirmed.
        self.assertEqual(harness.wait_message_count(self.broker._channel(), queue, len(ids), 15),
                         len(ids), proxy.log_text())
        self.assertEqual(proxy.log_lines("fallback:"), [])


if __name__ == "__main__":
    import unittest
    unittest.main()
