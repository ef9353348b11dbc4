"""Memory bounds that hold when the consumer sets no prefetch limit (issue 12, item 6).

A pika consumer that never calls basic.qos gets every message of the queue at once. The
records nackguard keeps of unacked deliveries (their content headers included) and the bodies
it retains count against limits.retained_body_bytes; past it, deliveries are forwarded with no
record (nackguard_untracked_deliveries_total) and nothing else changes for the client.

1. 600 messages of 300 bytes, limits.retained_body_bytes 64 KiB, a consumer with prefetch 0
   that holds every delivery before settling any: all 600 arrive; while they are all unacked,
   nackguard_retained_body_bytes is within a few records of the limit and no further,
   nackguard_retained_body_refusals_total and nackguard_untracked_deliveries_total count;
   the consumer then nacks 20 of them with requeue (ten recorded ones, ten not), gets those
   20 again, and acks everything, one by one: the queue ends empty, every body was seen, none
   lost, nackguard_retained_body_bytes goes back to 0 and the proxy still runs.
"""

# ctest-variants: quorum rmq40 rmq40.quorum rmq43 rmq43.quorum

import unittest

import harness
import operations_support as ops
import redelivery_support as rs
from redelivery_support import NO_RATE_LIMITS, props

LIMIT = 65536
COUNT = 600
BODY = 300


class PrefetchZeroBudget(ops.OpsTest):

    def test_prefetch_0_small_budget_bounds_memory_and_loses_nothing(self):
        queue = self.queue_name("prefetch0")
        policy = rs.policy_yaml(queue, max_redeliveries=5, requeue="immediate",
                                rate=NO_RATE_LIMITS)
        proxy = self.start_ops({"q.yaml": policy},
                               config={"limits": {"retained_body_bytes": LIMIT}})
        self.declare_source(proxy, queue)
        bodies = {f"m-{i:04d}".encode() + b"." * (BODY - 6) for i in range(COUNT)}
        self.broker.publish(queue, [(b, props(message_id=b[:6].decode())) for b in sorted(bodies)])

        conn = harness.connect(proxy.port)
        self.addCleanup(harness.close_connection, conn)
        ch = conn.channel()  # no basic_qos: prefetch 0
        got = []
        ch.basic_consume(queue, lambda c, m, p, b: got.append((m.delivery_tag, b)))
        harness.drain(conn, lambda: len(got) >= COUNT, timeout=30)
        self.assertEqual(len(got), COUNT)
        self.assertEqual({b for _, b in got}, bodies)

        page = proxy.metrics()
        held = page.value("nackguard_retained_body_bytes")
        # The bound is reached and held: within a few records of the limit (each worker
        # thread may pass it by one record between its check and its charge).
        self.assertGreater(held, LIMIT - 4096, "the budget was not used up")
        self.assertLessEqual(held, LIMIT + 4096, "more than the budget is held")
        self.assertEqual(page.value("nackguard_retained_body_bytes_limit"), LIMIT)
        untracked = page.value("nackguard_untracked_deliveries_total")
        self.assertGreater(untracked, 0)
        self.assertLess(untracked, COUNT)
        self.assertGreater(page.value("nackguard_retained_body_refusals_total"), 0)

        # Ten recorded deliveries (the first ones) and ten unrecorded ones (the last) go back.
        returned = got[:10] + got[-10:]
        for tag, _ in returned:
            ch.basic_nack(tag, requeue=True)
        harness.drain(conn, lambda: len(got) >= COUNT + 20, timeout=30)
        again = got[COUNT:]
        self.assertEqual(sorted(b for _, b in again), sorted(b for _, b in returned))
        for tag, _ in got[10:COUNT - 10] + again:
            ch.basic_ack(tag)
        harness.close_connection(conn)

        # Ready messages after the consumer's connection closed: any left unacked would be
        # back in the queue.
        self.assertEqual(harness.wait_message_count(self.broker._channel(), queue, 0), 0)
        proxy.wait_metric("nackguard_retained_body_bytes", 0, timeout=5)
        self.assertEqual(proxy.metrics().value("nackguard_retained_body_bytes"), 0)
        self.assert_proxy_alive(proxy)
        # Nothing was dead-lettered or delayed: the 20 returns were within the limit.
        self.assertFalse(self.broker.message_count(f"{queue}.dlq"))


if __name__ == "__main__":
    unittest.main()
