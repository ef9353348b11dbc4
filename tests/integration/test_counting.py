# ctest-variants: quorum rmq40 rmq40.quorum rmq43 rmq43.quorum
"""One exact count per message (issue 37): a poison is delivered max_redeliveries + 1 times,
then dead-lettered, and nothing else is dead-lettered or lost, across crashes, sidecars,
restarts, dead-letter queues and the broker's own limits. On classic and quorum queues of
RabbitMQ 3.10, 4.0 and 4.3. Each test failed on the code before the counting model (6cab5bb):

(1) innocent messages are never dead-lettered, nor counted for a crash that did not hold them:
    consumer processes (prefetch 10) that die on either of two poisons, max_redeliveries 3. P1
    is published alone and kills one consumer (a suspect from then on); then P2 and 8 good
    messages are published behind it. Each poison is handed out exactly 4 times (counting what
    the proxy had sent behind the poison a consumer died on) and dead-lettered (crash_loop,
    returns 4), the DLQ holds the two poisons only, each good message is acked once, and no
    good message carries an x-nackguard-returns above the number of crashes that held it.
    Before (3.10, quorum): P2 and the goods, waiting inside the proxy behind P1 at its crashes,
    took the broker's x-delivery-count and were dead-lettered at the first crash that held them.
(2) two sidecars share one count: a poison nacked in strict turns by a consumer behind each of
    two sidecars, max_redeliveries 3: 4 deliveries in all (2 each), then the DLQ with returns 4.
(3) a restart forgets nothing: a poison nacked twice through a sidecar, the sidecar killed with
    SIGKILL and started again, the poison nacked through the new one: 4 deliveries in all.
(4) a count belongs to its queue: a dead letter (returns 4) given back twice by a recovery
    worker reading Q.dlq (whose policy has max_redeliveries 3) stays in Q.dlq, is acked at its
    3rd delivery, and keeps its history (x-nackguard-reason, x-nackguard-queue Q).
(5) a limit set by a RabbitMQ policy never drops a message: quorum queues without a DLX,
    `delivery-limit: 5` set by rabbitmqctl set_policy, max_redeliveries 10, a consumer that
    nacks and one that rejects every delivery: 11 deliveries each, then Q.dlq. Quorum variants
    only. (5b) the same with the management API configured, on a private 3.10 node with the
    management plugin (only in the 3.10 quorum variant, the node costs a boot): /status.json
    shows the limit 5 from the management API before the poison comes.
"""

import collections
import os
import unittest
import uuid

import counting_support as cs
import harness
import redelivery_support as rs
import status_support
from pika.exceptions import ChannelClosedByBroker
from redelivery_support import NO_RATE_LIMITS, props

POISON = "poison"


def dead_letters(copies):
    """[(body, reason, returns)] of a DLQ's messages, sorted."""
    return sorted((body.decode(errors="replace"), p.headers.get("x-nackguard-reason"),
                   p.headers.get("x-nackguard-returns")) for _, p, body in copies)


def crash_attribution(events):
    """From crash consumers' events: how many crashes held each message in the consumer's
    hands (delivered and not acked, or read behind the poison), and the highest
    x-nackguard-returns each message carried on a delivery."""
    held, in_hand, carried = collections.Counter(), set(), collections.Counter()
    for e in events:
        if e[0] in ("deliver", "held"):
            in_hand.add(e[1])
            returns = dict(f.split("=", 1) for f in e[3:]).get("returns", "None")
            if returns != "None":
                carried[e[1]] = max(carried[e[1]], int(returns))
        elif e[0] == "ack":
            in_hand.discard(e[1])
        elif e[0] in ("crash", "idle-exit"):  # a close returns what is in hand, too
            held.update(in_hand)
            in_hand = set()
    return held, carried


class CountingTest(rs.RedeliveryTest):

    def policy(self, queue, max_redeliveries, file_name="q.yaml"):
        return {file_name: rs.policy_yaml(queue, max_redeliveries=max_redeliveries,
                                          rate=NO_RATE_LIMITS)}

    def dlq_count(self, queue):
        return self.broker.message_count(f"{queue}.dlq") or 0

    def publish(self, queue, labels):
        self.broker.publish(queue, [(label.encode(), props(
            message_id=f"{label}-{uuid.uuid4().hex[:8]}", delivery_mode=2)) for label in labels])

    def taker(self, proxy, queue, name):
        taker = cs.TurnTaker(proxy.port, queue, POISON, name)
        self.addCleanup(taker.close)
        return taker

    def check_ends_in_dlq(self, queue, deliveries, returns, reason, seen):
        """The poison was delivered `deliveries` times, is alone in the DLQ with `returns` and
        `reason`, and its queue is empty. `seen` says what else was observed."""
        copies = self.broker.get_all(f"{queue}.dlq")
        observed = (f"{seen}; poison delivered {deliveries} times; DLQ {dead_letters(copies)}; "
                    f"queue holds {self.broker.message_count(queue)}")
        self.assertEqual(deliveries, returns, observed)
        self.assertEqual(dead_letters(copies), [(POISON, reason, returns)], observed)
        self.assertEqual(harness.wait_message_count(self.broker._channel(), queue, 0), 0,
                         observed)

    # ------------------------------------------------------------ (1) crash attribution

    def test_1_innocent_messages_are_never_dead_lettered(self):
        queue = self.queue_name("c1")
        proxy = self.start_guard(self.policy(queue, 3))
        self.declare_source(proxy, queue)
        poisons = ["poison-1", "poison-2"]
        goods = [f"good-{i}" for i in range(1, 9)]
        events_path = os.path.join(proxy.dir, "consumer-events.txt")
        # P1 alone first: its crash makes it a suspect, handed out alone from then on, while
        # P2 and the goods wait inside the proxy behind it at its next three crashes.
        self.publish(queue, poisons[:1])
        codes, _, _ = cs.run_crash_consumers(proxy.port, queue, poisons, events_path,
                                             max_runs=1)
        self.assertEqual(harness.wait_message_count(self.broker._channel(), queue, 1), 1)
        self.publish(queue, poisons[1:] + goods)
        more, events, stderr = cs.run_crash_consumers(proxy.port, queue, poisons, events_path)
        codes += more
        # Handed out: delivered, or sent behind the poison the consumer died on.
        deliveries = collections.Counter(e[1] for e in events if e[0] in ("deliver", "held"))
        acks = collections.Counter(e[1] for e in events if e[0] == "ack")
        crashes_held, carried = crash_attribution(events)
        dlq = dead_letters(self.broker.get_all(f"{queue}.dlq"))
        observed = (f"exit codes {codes}; handed out {dict(deliveries)}; acks {dict(acks)}; "
                    f"DLQ {dlq}; crashes that held each good {dict(crashes_held)}; highest "
                    f"x-nackguard-returns each good carried {dict(carried)}; events in "
                    f"{events_path}; last consumer's stderr: {stderr[-2000:]}")
        self.assertEqual(codes[-1], 0, f"the last consumer idles out; {observed}")
        self.assertEqual(dlq, [(p, "crash_loop", 4) for p in poisons],
                         f"the poisons only, once each; {observed}")
        for poison in poisons:
            self.assertEqual(deliveries[poison], 4, f"{poison} handed out; {observed}")
        self.assertEqual(dict(acks), {g: 1 for g in goods}, f"goods acked once; {observed}")
        # A good message is counted only for the crashes that held it in a consumer's hands.
        for good in goods:
            self.assertLessEqual(carried[good], crashes_held[good], f"{good}; {observed}")
        self.assertEqual(harness.wait_message_count(self.broker._channel(), queue, 0), 0,
                         observed)

    # ------------------------------------------------------------ (2) two sidecars

    def test_2_two_sidecars_share_one_count(self):
        queue = self.queue_name("c2")
        policy = self.policy(queue, 3)
        sidecars = [self.start_guard(policy, name=f"c2-sidecar-{n}") for n in "ab"]
        self.declare_source(sidecars, queue)  # each consumer's application declares it
        self.publish(queue, ["good-0", POISON, "good-1"])
        takers = [self.taker(s, queue, f"behind-{n}") for s, n in zip(sidecars, "ab")]
        turns = cs.take_turns(takers, lambda: self.dlq_count(queue) >= 1)
        per_sidecar = [len(t.poison_deliveries) for t in takers]
        seen = f"{turns} turns; poison deliveries per sidecar (a, b) {per_sidecar}"
        self.assertEqual(per_sidecar, [2, 2], seen)
        self.assertEqual(sorted(takers[0].acked + takers[1].acked), ["good-0", "good-1"], seen)
        self.check_ends_in_dlq(queue, sum(per_sidecar), 4, "max_redeliveries", seen)

    # ------------------------------------------------------------ (3) a restart

    def test_3_a_restart_forgets_nothing(self):
        queue = self.queue_name("c3")
        policy = self.policy(queue, 3)
        before = self.start_guard(policy, name="c3-before-kill")
        self.declare_source(before, queue)
        self.publish(queue, [POISON])
        taker = self.taker(before, queue, "before-kill")
        for _ in range(2):
            self.assertTrue(taker.turn(lambda: False))
        # A close waits for a copy in flight: then the poison is in its queue, once.
        self.assertTrue(taker.close(), "the consumer's close completed cleanly")
        self.assertEqual(harness.wait_message_count(self.broker._channel(), queue, 1), 1,
                         before.log_text())
        before.process.kill()  # SIGKILL: the sidecar's memory is gone
        before.process.wait()
        after = self.start_guard(policy, name="c3-after-restart")
        self.declare_source(after, queue)
        consumer = self.consumer(after, queue, lambda d: "nack")
        done = rs.poll_until([consumer], lambda: self.dlq_count(queue) >= 1, timeout=20)
        seen = (f"dead-lettered: {done}; 2 deliveries before the kill, "
                f"{consumer.delivered(POISON)} after it")
        self.check_ends_in_dlq(queue, 2 + consumer.delivered(POISON), 4, "max_redeliveries",
                               seen)

    # ------------------------------------------------------------ (4) a DLQ's own count

    def test_4_a_count_belongs_to_its_queue(self):
        queue = self.queue_name("c4")
        dlq = f"{queue}.dlq"
        self.cleanup_queues(f"{dlq}.dlq")
        policies = {**self.policy(queue, 3), **self.policy(dlq, 3, file_name="dlq.yaml")}
        proxy = self.start_guard(policies)
        self.declare_source(proxy, queue)
        self.publish(queue, [POISON])
        app = self.consumer(proxy, queue, lambda d: "nack")
        self.assertTrue(rs.poll_until([app], lambda: self.dlq_count(queue) == 1, timeout=20),
                        f"poison delivered {app.delivered(POISON)} times, not dead-lettered")
        self.assertEqual(app.delivered(POISON), 4)
        self.assertTrue(app.close())
        # A recovery worker gives the dead letter back twice, then handles it.
        worker = self.consumer(proxy, dlq, lambda d: "ack" if len(worker.deliveries) >= 3
                               else "nack")
        done = rs.poll_until(
            [worker], lambda: worker.acks[POISON] == 1 or self.dlq_count(dlq) > 0, timeout=20)
        history = [(d.props.headers or {}) for d in worker.deliveries]
        seen = (f"done: {done}; {dlq}.dlq holds {self.broker.message_count(f'{dlq}.dlq')}; "
                "deliveries from Q.dlq (redelivered, headers): "
                f"{[(d.redelivered, h) for d, h in zip(worker.deliveries, history)]}")
        self.assertEqual(worker.delivered(POISON), 3, seen)
        self.assertEqual(dict(worker.acks), {POISON: 1}, seen)
        self.assertIn(self.broker.message_count(f"{dlq}.dlq"), (None, 0), seen)
        self.assertEqual(harness.wait_message_count(self.broker._channel(), dlq, 0), 0, seen)
        self.assertEqual(history[0].get("x-nackguard-returns"), 4, seen)
        for headers in history:
            self.assertEqual((headers.get("x-nackguard-reason"),
                              headers.get("x-nackguard-queue")), ("max_redeliveries", queue),
                             seen)

    # ------------------------------------------------------------ (5) a RabbitMQ policy's limit

    def test_5_a_policy_limit_never_drops_a_message(self):
        if harness.QUEUE_TYPE != "quorum":
            self.skipTest("quorum queues only: this version's .quorum variant runs it")
        queues = {"nack": self.queue_name("c5n"), "reject": self.queue_name("c5r")}
        policies = {}
        for method, queue in queues.items():
            policies.update(self.policy(queue, 10, file_name=f"{method}.yaml"))
        proxy = self.start_guard(policies)
        name = cs.set_delivery_limit_policy(harness.rabbitmqctl, list(queues.values()), 5)
        self.addCleanup(harness.rabbitmqctl, "clear_policy", "-p", "/", name)
        consumers = {}
        for method, queue in queues.items():
            self.declare_source(proxy, queue)  # no DLX: past its limit the broker drops
            self.publish(queue, [POISON])
            consumers[method] = self.consumer(proxy, queue, lambda d, m=method: m)
        in_force = harness.rabbitmqctl("list_queues", "-q", "--no-table-headers", "name",
                                       "policy")
        for queue in queues.values():
            self.assertIn(f"{queue}\t{name}", in_force, "the RabbitMQ policy applies")
        done = rs.poll_until(list(consumers.values()),
                             lambda: all(self.dlq_count(q) == 1 for q in queues.values()),
                             timeout=25)
        for method, queue in queues.items():
            with self.subTest(method=method):
                self.check_ends_in_dlq(queue, consumers[method].delivered(POISON), 11,
                                       "max_redeliveries", f"{method}, in the DLQs: {done}")


class ManagementLimitTest(rs.RedeliveryTest):
    """(5b) upstream.management: the limit set by a RabbitMQ policy is learnt and in force."""

    @classmethod
    def setUpClass(cls):
        if harness.RABBITMQ_VERSION != "3.10" or harness.QUEUE_TYPE != "quorum":
            raise unittest.SkipTest("one variant (3.10, quorum) starts the management node")
        super().setUpClass()
        cls.node = cs.ManagementNode()
        cls.node.start()

    @classmethod
    def tearDownClass(cls):
        cls.node.stop()
        super().tearDownClass()

    def node_count(self, queue):
        """The ready count of a queue on the node, 0 if it does not exist."""
        channel = self.direct.channel()
        try:
            return channel.queue_declare(queue, passive=True).method.message_count
        except ChannelClosedByBroker as exc:
            if exc.reply_code == 404:
                return 0
            raise
        finally:
            if channel.is_open:
                channel.close()

    def test_5b_a_policy_limit_learnt_from_the_management_api(self):
        queue = f"nackguard-it.counting-mgmt.{uuid.uuid4().hex[:10]}"
        proxy = cs.ManagementGuard({"q.yaml": rs.policy_yaml(
            queue, max_redeliveries=10, rate=NO_RATE_LIMITS)}, self.node)
        self._test_proxies.append(proxy)
        self.addCleanup(proxy.cleanup)
        proxy.start()
        name = cs.set_delivery_limit_policy(self.node.ctl, [queue], 5)
        self.addCleanup(self.node.ctl, "clear_policy", "-p", "/", name)
        for q in (f"{queue}.dlq", queue):
            self.addCleanup(harness.delete_queue, q, self.node.AMQP_PORT)
        conn = harness.connect(proxy.port)  # the application declares it through the sidecar
        self.addCleanup(harness.close_connection, conn)
        conn.channel().queue_declare(queue, durable=True, arguments={"x-queue-type": "quorum"})
        self.direct = harness.connect(self.node.AMQP_PORT)
        self.addCleanup(harness.close_connection, self.direct)
        channel = self.direct.channel()
        channel.confirm_delivery()
        consumer = self.consumer(proxy, queue, lambda d: "nack" if d.label == POISON else "ack")
        # A first delivery has the sidecar look the queue up; the limit shows once learnt.
        channel.basic_publish("", queue, b"good", props(message_id="good"))
        want = {"limit": 5, "from": "management_api"}
        row = {}

        def learnt():
            doc = status_support.status_json(proxy)
            rows = [r for r in doc["queues"] if r["queue"] == queue]
            row["last"] = rows[0] if rows else None
            return rows and rows[0]["delivery_limit"] == want

        self.assertTrue(rs.poll_until([consumer], learnt, timeout=45),
                        f"/status.json's row of the queue: {row.get('last')}")
        channel.basic_publish("", queue, POISON.encode(), props(message_id="poison"))
        done = rs.poll_until([consumer],
                             lambda: self.node_count(f"{queue}.dlq") == 1, timeout=25)
        self.assertEqual(consumer.delivered(POISON), 11,
                         f"in the DLQ: {done}; queue holds {self.node_count(queue)}")
        self.assertEqual(consumer.acks["good"], 1)
        method, p, body = channel.basic_get(f"{queue}.dlq", auto_ack=True)
        self.assertEqual((body, p.headers.get("x-nackguard-reason"),
                          p.headers.get("x-nackguard-returns")),
                         (POISON.encode(), "max_redeliveries", 11))
        self.assertEqual(self.node_count(queue), 0)


if __name__ == "__main__":
    unittest.main()
