# ctest-variants: quorum rmq40 rmq40.quorum rmq43 rmq43.quorum
"""Consumers in transaction mode (tx.select) through nackguard, against a real RabbitMQ.

RabbitMQ keeps a transactional channel's acks, nacks and rejects until tx.commit, and drops
them at tx.rollback: the deliveries are unacked again (nothing is requeued), and the client
may settle them anew. An ack nackguard sends on the channel is part of the client's
transaction too. What is proven, with exact counts:

(a) a pika consumer in tx mode that nacks the poison (requeue=True) and acks the good
    messages, committing after each: the poison is delivered exactly max_redeliveries + 1
    (4) times, then sits in <queue>.dlq exactly once; each good message is delivered and
    acked exactly once; the queue ends empty; the channel stays open; no fallback.
(b) max_redeliveries 0 (the first nack is taken over): a nack, a tx.rollback, then an ack
    and a commit: nothing is copied to the DLQ, the message is acked (the queue ends empty,
    nothing left unacked), and the channel stays open.
(c) the same with a second nack after the rollback, then a commit: exactly one copy in the
    DLQ, the queue ends empty, the channel stays open.
"""

import unittest
import uuid

import redelivery_support as rs
from redelivery_support import NO_RATE_LIMITS, props

POISON = "poison"
GOODS = [f"good-{i}" for i in range(10)]


class TransactionTest(rs.RedeliveryTest):

    def policy(self, queue, max_redeliveries):
        return {"q.yaml": rs.policy_yaml(queue, max_redeliveries=max_redeliveries,
                                         requeue="immediate", rate=NO_RATE_LIMITS)}

    def publish(self, queue, labels):
        self.broker.publish(queue, [(label.encode(), props(message_id=f"mid-{label}"))
                                    for label in labels])

    def tx_consumer(self, proxy, queue, on_delivery, prefetch=10):
        """A Recorder whose channel is in tx mode; on_delivery(recorder, delivery) settles
        and commits or rolls back itself."""
        consumer = self.consumer(proxy, queue, lambda d: None, prefetch=prefetch)
        consumer.decide = lambda d: on_delivery(consumer, d)
        consumer.ch.tx_select()  # deliveries are dispatched only while polling, after it
        return consumer

    def assert_settled_and_open(self, consumer, queue):
        self.assertTrue(consumer.ch.is_open and consumer.conn.is_open,
                        "the consumer's channel was closed")
        self.assertTrue(consumer.close(), "the consumer's connection did not close cleanly")
        # Closing requeues whatever was left unacked: nothing may be.
        self.assertEqual(self.broker.message_count(queue), 0, "the queue is not empty")

    def test_a_nack_and_commit_after_each_message(self):
        queue = self.queue_name("tx-a")
        proxy = self.start_guard(self.policy(queue, 3))
        self.declare_source(proxy, queue)
        labels = GOODS[:5] + [POISON] + GOODS[5:]
        self.publish(queue, labels)

        def on_delivery(consumer, d):
            if d.label == POISON:
                consumer.ch.basic_nack(d.tag, requeue=True)
                consumer.returns[d.label] += 1
            else:
                consumer.ack(d)
            consumer.ch.tx_commit()
            return None

        consumer = self.tx_consumer(proxy, queue, on_delivery)
        dlq = f"{queue}.dlq"
        done = rs.poll_until([consumer], lambda: sum(consumer.acks.values()) >= len(GOODS) and
                             (self.broker.message_count(dlq) or 0) >= 1, timeout=60, quiet=1.0)
        self.assertTrue(done, f"not done: {consumer.delivered(POISON)} poison deliveries, "
                              f"{sum(consumer.acks.values())} acks")
        self.assertEqual(consumer.delivered(POISON), 4, "poison deliveries (max_redeliveries 3)")
        for label in GOODS:
            self.assertEqual((consumer.delivered(label), consumer.acks[label]), (1, 1), label)
        self.assertEqual([m[2] for m in self.broker.get_all(dlq)], [POISON.encode()])
        self.assert_settled_and_open(consumer, queue)
        self.assertEqual(proxy.log_lines(f"fallback: queue={queue}"), [])
        self.assertEqual(len(proxy.log_lines(f"dead-lettered: queue={queue} ")), 1)
        self.assert_proxy_alive(proxy)

    def rollback_scenario(self, tag, then):
        """One message; max_redeliveries 0. The consumer nacks it, rolls back, then does
        `then` ("ack" or "nack") and commits."""
        queue = self.queue_name(tag)
        proxy = self.start_guard(self.policy(queue, 0))
        self.declare_source(proxy, queue)
        label = "m-" + uuid.uuid4().hex[:6]
        self.publish(queue, [label])
        steps = []

        def on_delivery(consumer, d):
            consumer.ch.basic_nack(d.tag, requeue=True)
            consumer.ch.tx_rollback()
            if then == "ack":
                consumer.ack(d)
            else:
                consumer.ch.basic_nack(d.tag, requeue=True)
            consumer.ch.tx_commit()
            steps.append(d.label)
            return None

        consumer = self.tx_consumer(proxy, queue, on_delivery)
        dlq = f"{queue}.dlq"
        rs.poll_until([consumer], lambda: bool(steps), timeout=30, quiet=2.0)
        self.assertEqual(steps, [label], "deliveries")
        self.assertTrue(consumer.ch.is_open, "the consumer's channel was closed")
        self.assert_settled_and_open(consumer, queue)
        # The connection gone from nackguard's gauge, its session has ended, and a session
        # ends only after the broker confirmed every copy it made: any dead-letter is in.
        page = proxy.wait_metric("nackguard_client_connections", 0, timeout=15)
        self.assertEqual(page.value("nackguard_client_connections"), 0)
        copies = [m[2] for m in self.broker.get_all(dlq)]
        self.assertEqual(copies, [] if then == "ack" else [label.encode()], "DLQ contents")
        self.assertEqual(proxy.log_lines(f"fallback: queue={queue}"), [])
        self.assert_proxy_alive(proxy)

    def test_b_rollback_after_a_nack_then_ack(self):
        self.rollback_scenario("tx-b", "ack")

    def test_c_rollback_after_a_nack_then_nack_again(self):
        self.rollback_scenario("tx-c", "nack")


if __name__ == "__main__":
    unittest.main()
