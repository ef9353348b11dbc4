# ctest-variants: quorum rmq40 rmq40.quorum rmq43 rmq43.quorum
"""The policy's ack_timeout (issue 12, item 9): nackguard closes the channel of a consumer
that holds a delivery unacked too long, before RabbitMQ's own consumer_timeout (30 min by
default) would, and counts one return of that delivery alone.

(a) 5 innocent messages, the poison, 5 more; max_redeliveries 1, ack_timeout 2s; a consumer
    (prefetch 10) that acks every innocent message at once and sleeps on the poison until its
    channel is closed, then opens a new one (hung_consumer.py): each hang lasts about 2 s; the
    poison is delivered exactly 2 times, then sits in <queue>.dlq with x-nackguard-reason
    consumer_timeout and x-nackguard-returns 2; each innocent message is acked exactly once;
    the 5 behind the poison, requeued with it at each close (in the client's buffer the
    first time, held back in the proxy behind the suspect poison the second), count nothing:
    on a classic queue they are acked as redeliveries; on a quorum queue every redelivery
    carries x-delivery-count, and under the assumed delivery limit (2) nackguard republishes
    it before the consumer sees it (docs/choosing-a-policy.md, "Quorum queues"), so they
    are acked from copies carrying x-nackguard-returns 0, and the poison's second delivery is
    such a copy too (x-nackguard-returns 1, x-nackguard-suspect): 11 republishes, 5 at each
    close and the poison's. The client saw two channel closes, 406 naming the delivery and
    the ack_timeout; nackguard counted exactly 2 returns and 2 ack timeouts on the queue;
    the queue ends empty; the dead-letter log line says reason=consumer_timeout.
"""

import unittest

import harness
import hung_consumer
import redelivery_support as rs
from redelivery_support import NO_RATE_LIMITS, props

POISON = "poison"
INNOCENT = [f"innocent-{i}" for i in range(10)]


class AckTimeoutTest(rs.RedeliveryTest):

    def test_a_hung_consumer_is_closed_and_only_the_poison_counted(self):
        queue = self.queue_name("ack-timeout")
        dlq = f"{queue}.dlq"
        proxy = self.start_guard({"q.yaml": rs.policy_yaml(
            queue, max_redeliveries=1, rate=NO_RATE_LIMITS, ack_timeout="2s")})
        self.declare_source(proxy, queue)
        self.broker.publish(queue, [(label.encode(), props(message_id=f"mid-{label}"))
                                    for label in INNOCENT[:5] + [POISON] + INNOCENT[5:]])

        conn = harness.connect(proxy.port)
        self.addCleanup(harness.close_connection, conn)
        result = hung_consumer.run(conn, queue, POISON, INNOCENT,
                                   done=lambda: self.broker.message_count(dlq) == 1,
                                   limit_s=60.0)

        events = result.events
        self.assertTrue(result.hangs and all(h < 10 for h in result.hangs),
                        f"hangs (s): {result.hangs}: nackguard closes the channel about 2 s "
                        f"after the poison's delivery (ack_timeout 2s, checked once a second)")
        self.assertEqual(result.deliveries_of(POISON), 2, f"poison deliveries: {events}")
        # The innocent messages before the poison were acked before it came; those behind it
        # went back with it at each close, uncounted (only the timed-out delivery counts).
        quorum = harness.QUEUE_TYPE == "quorum"
        result.assert_innocent_acked_once(self, INNOCENT, quorum)
        self.assertEqual(proxy.metrics().value("nackguard_requeues_total", queue=queue,
                                               action="republished"), 11 if quorum else 0)
        self.assertEqual(len(result.closes), 2, result.closes)
        for code, text in result.closes:
            self.assertEqual(code, 406, text)
            self.assertIn("nackguard: delivery acknowledgement on channel", text)
            self.assertIn(f"from queue '{queue}'", text)
            self.assertIn("ack_timeout of 2000 ms", text)
        copies = self.broker.get_all(dlq)
        self.assertEqual([body for _, _, body in copies], [POISON.encode()], "DLQ contents")
        headers = copies[0][1].headers or {}
        self.assertEqual(headers.get("x-nackguard-reason"), "consumer_timeout")
        self.assertEqual(headers.get("x-nackguard-returns"), 2)
        self.assertEqual(proxy.metrics().value("nackguard_returns_total", queue=queue), 2.0)
        self.assertEqual(proxy.metrics().value("nackguard_ack_timeouts_total", queue=queue), 2.0)
        self.assertEqual(self.broker.message_count(queue), 0)
        lines = proxy.log_lines(f"dead-lettered: queue={queue} ")
        self.assertEqual(len(lines), 1, lines)
        self.assertIn("reason=consumer_timeout", lines[0])
        self.assertEqual(len(proxy.log_lines(f"ack timeout: queue={queue} ")), 2)
        self.assert_proxy_alive(proxy)


if __name__ == "__main__":
    unittest.main()
