# ctest-variants: quorum rmq40 rmq40.quorum rmq43 rmq43.quorum
"""Outage detection counts distinct messages, not deliveries (issue 12, item 4), end to end.

(a) 2 good messages and 1 poison on a quiet queue, max_redeliveries 30, requeue immediate,
    rate.per_message 1000 and the default outage settings (min_messages 20, ratio 0.5): the
    poison is delivered exactly 31 times, then sits in <queue>.dlq with x-nackguard-returns 31;
    no outage is declared. Counting deliveries, the poison's own redeliveries reached the
    minimum and it was held in a delay queue after 20 deliveries instead.
(b) the old key rate.min_deliveries still loads, with a warning naming the file, line and key:
    printed by --check-config, logged at start.

The 5-second outage of test_redelivery (f) shows that a real outage is still detected.
"""

import os
import subprocess
import unittest
import uuid

import harness
import redelivery_support as rs
from redelivery_support import props

POISON = "poison"
GOODS = ["good-0", "good-1"]


class OutageDetectionTest(rs.RedeliveryTest):

    def test_a_lone_poison_is_no_outage(self):
        queue = self.queue_name("outage-a")
        proxy = self.start_guard({"q.yaml": rs.policy_yaml(
            queue, max_redeliveries=30, requeue="immediate",
            rate={"window": "10s", "per_message": 1000})})
        self.declare_source(proxy, queue)
        poison_id = "poison-" + uuid.uuid4().hex
        self.broker.publish(queue, [
            (GOODS[0].encode(), props(message_id="mid-" + uuid.uuid4().hex)),
            (POISON.encode(), props(message_id=poison_id)),
            (GOODS[1].encode(), props(message_id="mid-" + uuid.uuid4().hex))])
        consumer = self.consumer(
            proxy, queue, lambda d: "nack" if d.label == POISON else "ack", prefetch=10)
        done = rs.poll_until(
            [consumer],
            lambda: sum(consumer.acks.values()) >= 2 and
            (self.broker.message_count(f"{queue}.dlq") or 0) >= 1,
            timeout=60, quiet=1.0)
        self.assertTrue(done, f"not done in 60 s: {consumer.delivered(POISON)} poison "
                              f"deliveries, acks {dict(consumer.acks)}")
        self.assertEqual(consumer.delivered(POISON), 31, "poison deliveries (max 30)")
        self.assertEqual(consumer.returns[POISON], 31)
        self.assertEqual({label: consumer.acks[label] for label in GOODS},
                         {label: 1 for label in GOODS})
        self.assertTrue(consumer.ch.is_open and consumer.conn.is_open)
        self.assertTrue(consumer.close(), "the consumer's connection did not close cleanly")
        dlq = self.broker.get_all(f"{queue}.dlq")
        self.assertEqual([body for _, _, body in dlq], [POISON.encode()])
        headers = dlq[0][1].headers or {}
        self.assertEqual(headers.get("x-nackguard-returns"), 31)
        self.assertEqual(headers.get("x-nackguard-reason"), "max_redeliveries")
        self.assertEqual(self.broker.message_count(queue), 0)
        self.assertEqual(proxy.log_lines(f"outage started: queue={queue} "), [])
        self.assertEqual(proxy.log_lines(f"fallback: queue={queue}"), [])
        self.assertEqual(proxy.log_lines("min_deliveries"), [])

    def test_b_old_key_loads_with_a_warning(self):
        queue = self.queue_name("outage-b")
        text = (f"queue: {rs._yaml_str(queue)}\nmax_redeliveries: 3\n"
                "rate:\n  window: 10s\n  min_deliveries: 7\n")
        proxy = self.start_guard({"old.yaml": text})
        policy_file = os.path.join(proxy.dir, "policies", "old.yaml")
        expected = (f"{policy_file}:5:3: rate.min_deliveries: renamed rate.min_messages "
                    "(outage detection counts distinct messages, not deliveries); the old "
                    "name still works, rename the key")
        self.assertEqual(len(proxy.log_lines(expected)), 1, proxy.log_text())
        check = subprocess.run([harness.PROXY_BIN, "--config", proxy.config_path,
                                "--check-config"], capture_output=True, text=True, timeout=30)
        self.assertEqual(check.returncode, 0, check.stderr)
        self.assertIn("warning: " + expected + "\n", check.stderr)
        self.assertIn("  rate.min_messages: 7\n", check.stdout)
        self.assertIn("  rate.max_outage: 30m\n", check.stdout)


if __name__ == "__main__":
    unittest.main()
