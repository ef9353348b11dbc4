# ctest-variants: quorum rmq40 rmq40.quorum rmq43 rmq43.quorum
"""Which delivered bodies nackguard keeps in memory (issue 13), end to end against a real
RabbitMQ, on classic and quorum queues of 3.10, 4.0 and 4.3 (tests/integration/CMakeLists.txt).

nackguard_retained_body_bytes counts the bodies kept for a return that may become a copy, and
the records of unacked deliveries (a few hundred bytes each). A consumer holds 20 first
deliveries of 64 KiB unacked:

(a) under `requeue: immediate` and max_redeliveries 3, whose first return is forwarded, the
    gauge stays below 20 KiB on a classic queue (records only, no body), and is 0 once they
    are acked; on a quorum queue it holds the 20 bodies (a crash's return there is always a
    copy, docs/choosing-a-policy.md, "Crashes"), and is 0 once they are acked;
(b) under `requeue: delayed`, and under max_redeliveries 0, it holds at least the 20 bodies;
(c) a 64 KiB poison under (a)'s policy is still delivered exactly max_redeliveries + 1 = 4
    times, then sits in the DLQ with its body byte-exact, and no fallback is counted: its
    first return was forwarded (without a body kept on a classic queue), and every copy made
    (republishes, the dead letter) had the body.
"""

import unittest

import harness
import redelivery_support as rs
from redelivery_support import NO_RATE_LIMITS, props

BODY_SIZE = 64 * 1024
HELD = 20


def body_of(label):
    head = label.encode() + b"|"
    return head + bytes((i * 7) & 0xFF for i in range(BODY_SIZE - len(head)))


class BodyRetentionTest(rs.RedeliveryTest):

    def retained(self, proxy):
        return proxy.metrics().value("nackguard_retained_body_bytes")

    def hold_first_deliveries(self, tag, **policy):
        """Publishes HELD messages of BODY_SIZE, has a consumer hold them all unacked through
        a proxy with `policy`; returns the retained bytes then and after acking them all."""
        queue = self.queue_name(tag)
        proxy = self.start_guard({"q.yaml": rs.policy_yaml(queue, rate=NO_RATE_LIMITS,
                                                           **policy)})
        self.declare_source(proxy, queue)
        labels = [f"m{i:02d}" for i in range(HELD)]
        self.broker.publish(queue, [(body_of(label), props(message_id=f"mid-{label}"))
                                    for label in labels])
        consumer = self.consumer(proxy, queue, lambda d: None, prefetch=HELD)
        self.assertTrue(rs.poll_until([consumer], lambda: consumer.delivered() == HELD,
                                      timeout=20, quiet=0.3),
                        f"{consumer.delivered()} of {HELD} delivered")
        self.assertFalse(any(d.redelivered for d in consumer.deliveries))
        held = self.retained(proxy)
        for d in list(consumer.pending):
            consumer.ack(d)
        after = None
        for _ in range(100):
            consumer.poll(0.05)
            after = self.retained(proxy)
            if after == 0:
                break
        self.assertEqual(self.broker.message_count(queue), 0)
        return held, after

    def test_a_first_deliveries_under_immediate_keep_no_body(self):
        held, after = self.hold_first_deliveries("imm", max_redeliveries=3)
        if harness.QUEUE_TYPE == "quorum":
            # A crash's return on a quorum queue is always a copy: every body is kept.
            self.assertGreaterEqual(held, HELD * BODY_SIZE)
        else:
            # Each record is a few hundred bytes; one body alone would be 64 KiB.
            self.assertGreater(held, 0, "the records of the unacked deliveries are counted")
            self.assertLess(held, 20 * 1024,
                            f"{held} bytes retained for {HELD} unacked deliveries")
        self.assertEqual(after, 0)

    def test_b1_requeue_delayed_keeps_every_body(self):
        held, after = self.hold_first_deliveries("delayed", max_redeliveries=3,
                                                 requeue="delayed")
        self.assertGreaterEqual(held, HELD * BODY_SIZE)
        self.assertEqual(after, 0)

    def test_b2_max_redeliveries_zero_keeps_every_body(self):
        held, after = self.hold_first_deliveries("zero", max_redeliveries=0)
        self.assertGreaterEqual(held, HELD * BODY_SIZE)
        self.assertEqual(after, 0)

    def test_c_poison_still_dead_lettered_after_max_plus_one_deliveries(self):
        queue = self.queue_name("poison")
        dlq = f"{queue}.dlq"
        proxy = self.start_guard({"q.yaml": rs.policy_yaml(queue, max_redeliveries=3,
                                                           rate=NO_RATE_LIMITS)})
        self.declare_source(proxy, queue)
        goods = [f"good-{i}" for i in range(5)]
        poison = body_of("poison")
        self.broker.publish(queue, [(body_of(g), props(message_id=f"mid-{g}")) for g in goods[:2]]
                            + [(poison, props(message_id="mid-poison"))]
                            + [(body_of(g), props(message_id=f"mid-{g}")) for g in goods[2:]])
        consumer = self.consumer(
            proxy, queue, lambda d: "nack" if d.body == poison else "ack", prefetch=10)
        self.assertTrue(rs.poll_until([consumer], lambda: self.broker.message_count(dlq) == 1,
                                      timeout=30, quiet=1.0),
                        f"the poison never reached {dlq}")
        self.assertEqual(sum(1 for d in consumer.deliveries if d.body == poison), 4)
        self.assertEqual(sum(consumer.acks.values()), len(goods))
        self.assertEqual(len(consumer.acks), len(goods), "a good message acked twice")
        (method, p, body), = self.broker.get_all(dlq)
        self.assertEqual(body, poison)
        self.assertEqual(p.headers.get("x-nackguard-returns"), 4)
        self.assertEqual(p.headers.get("x-nackguard-reason"), "max_redeliveries")
        self.assertEqual(self.broker.message_count(queue), 0)
        page = proxy.metrics()
        self.assertEqual(sum(v for _, v in page.series("nackguard_fallbacks_total")), 0,
                         f"fallbacks: {page.series('nackguard_fallbacks_total')}")
        # How the 4 returns went (docs/choosing-a-policy.md, "How nackguard counts"). On a
        # classic queue the first return since a copy is forwarded, the next republished
        # with its count: returns 1 and 3 forwarded, 2 republished, 4 dead-lettered. On a
        # quorum queue only the original's first return is forwarded: every copy there is
        # exact (x-nackguard-exact), and each of its returns is a copy. On 3.10 and 4.0 a
        # nack counts in x-delivery-count, and under the assumed delivery limit the first
        # redelivery is republished before the consumer sees it: returns 2 and 3 are copies
        # of that copy (3 republished). On 4.3 a nack does not count there: returns 2 and 3
        # are the copies (2 republished).
        if harness.QUEUE_TYPE != "quorum":
            forwarded, republished = 2, 1
        elif harness.broker_counts_nacks():
            forwarded, republished = 1, 3
        else:
            forwarded, republished = 1, 2
        self.assertEqual(
            (page.value("nackguard_requeues_total", queue=queue, action="forwarded"),
             page.value("nackguard_requeues_total", queue=queue, action="republished")),
            (forwarded, republished), "returns forwarded, republished")
        self.assertEqual(page.value("nackguard_dead_letters_total", queue=queue,
                                    reason="max_redeliveries"), 1)
        self.assertEqual(proxy.log_lines(f"fallback: queue={queue}"), [])


if __name__ == "__main__":
    unittest.main()
