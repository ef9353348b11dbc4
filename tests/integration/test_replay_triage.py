# ctest-variants: rmq40 rmq43 rmq43.quorum
"""`nackguard replay` as triage, against a real RabbitMQ (issue 14): grouping, selecting, and
the JSON summary.

A DLQ holds dead letters from two sources (header source_id A and B) and two reasons:

- `--dry-run --group-by header:source_id,reason` prints exact counts per group, with each
  group's first and last return; `--format json` says the same as one JSON document;
- `--where header:source_id=A` moves exactly A's messages, in their order; B's stay in the
  DLQ, untouched and in their order; a dry run with the same --where counts what it moves;
- `--since 1d` moves the messages last returned within a day and leaves the older ones;
- a second run with the same --where moves nothing;
- with quorum queues on both sides (the DLQ as nackguard declares it): 11 dry runs count the
  returns exactly (x-delivery-count 0 to 10) and the 11th warns; then --where moves exactly
  one source, in order, and the other stays. On RabbitMQ 4.3 a dry run's requeue (a
  basic.nack) does not count in x-delivery-count: the 11 dry runs see no returns and nothing
  warns (no delivery limit can drop the messages).

On RabbitMQ 3.10, 4.0 (rmq40) and 4.3 (rmq43).
"""

import datetime
import json
import unittest

import pika

import harness
import waiting

from replay_support import URL, ReplayCase, replay

# (message id, source_id, reason), in the order they sit in the DLQ.
MIX = [("a0", "A", "max_redeliveries"), ("b0", "B", "crash_loop"),
       ("a1", "A", "max_redeliveries"), ("b1", "B", "max_redeliveries"),
       ("a2", "A", "crash_loop"), ("b2", "B", "crash_loop"),
       ("a3", "A", "max_redeliveries"), ("b3", "B", "max_redeliveries")]
T0 = datetime.datetime(2024, 5, 1, 12, 0, 0)


class ReplayTriageTest(ReplayCase):

    def publish(self, dlq, mix, last_returns=None):
        """Dead letters with x-nackguard-* headers; the i-th last returned at last_returns[i]
        (default T0 + i minutes)."""
        for i, (message_id, source, reason) in enumerate(mix):
            last = last_returns[i] if last_returns else T0 + datetime.timedelta(minutes=i)
            headers = {"source_id": source, "x-nackguard-reason": reason,
                       "x-nackguard-returns": 6, "x-nackguard-queue": "orders",
                       "x-nackguard-first-return": last - datetime.timedelta(minutes=1),
                       "x-nackguard-last-return": last}
            self.channel.basic_publish("", dlq, message_id.encode(), pika.BasicProperties(
                message_id=message_id, headers=headers, delivery_mode=2))

    def ids(self, queue):
        return [props.message_id for props, _ in self.take_all(queue)]

    def test_grouped_dry_run_counts_per_source_and_reason(self):
        with self.queues() as (q, dlq):
            self.publish(dlq, MIX)
            result = replay("--upstream", URL, "--from", dlq, "--to", q, "--dry-run",
                            "--group-by", "header:source_id,reason")
            self.assertExit(result, 0)
            out = result[1]
            self.assertIn("would move: 8\n", out)
            self.assertIn("\nby header:source_id, reason:\n"
                          "  A / crash_loop: would move 1, first return 2024-05-01T12:03:00Z, "
                          "last return 2024-05-01T12:04:00Z\n"
                          "  A / max_redeliveries: would move 3, first return 2024-05-01T11:59:00Z, "
                          "last return 2024-05-01T12:06:00Z\n"
                          "  B / crash_loop: would move 2, first return 2024-05-01T12:00:00Z, "
                          "last return 2024-05-01T12:05:00Z\n"
                          "  B / max_redeliveries: would move 2, first return 2024-05-01T12:02:00Z, "
                          "last return 2024-05-01T12:07:00Z\n", out)
            self.assertEqual(self.count(q), 0)
            self.assertEqual(self.ids(dlq), [m for m, _, _ in MIX])

    def test_json_summary_has_the_same_counts(self):
        with self.queues() as (q, dlq):
            self.publish(dlq, MIX)
            result = replay("--upstream", URL, "--from", dlq, "--to", q, "--dry-run",
                            "--group-by", "header:source_id,reason", "--format", "json")
            self.assertExit(result, 0)
            doc = json.loads(result[1])
            self.assertEqual((doc["from"], doc["to"], doc["dry_run"]), (dlq, q, True))
            self.assertEqual((doc["looked_at"], doc["moved"], doc["not_selected"]), (8, 8, 0))
            self.assertEqual(doc["group_by"], ["header:source_id", "reason"])
            counts = {(g["key"]["header:source_id"], g["key"]["reason"]): g["moved"]
                      for g in doc["groups"]}
            self.assertEqual(counts, {("A", "crash_loop"): 1, ("A", "max_redeliveries"): 3,
                                      ("B", "crash_loop"): 2, ("B", "max_redeliveries"): 2})
            self.assertEqual(doc["groups"][0]["first_return"], "2024-05-01T12:03:00Z")
            self.assertEqual(doc["stopped"], "the queue is empty")

    def test_where_moves_exactly_one_source_and_leaves_the_rest_in_order(self):
        with self.queues() as (q, dlq):
            self.publish(dlq, MIX)
            where = ("--where", "header:source_id=A")
            dry = replay("--upstream", URL, "--from", dlq, "--to", q, "--dry-run", *where)
            self.assertExit(dry, 0)
            self.assertIn("would move: 4\n", dry[1])
            self.assertIn(f"not selected (outside --where, --since or --until; left in {dlq}): 4\n",
                          dry[1])
            result = replay("--upstream", URL, "--from", dlq, "--to", q, *where)
            self.assertExit(result, 0)
            self.assertIn("moved: 4\n", result[1])
            again = replay("--upstream", URL, "--from", dlq, "--to", q, *where)
            self.assertExit(again, 0)
            self.assertIn("moved: 0\n", again[1])
            self.assertEqual(self.ids(q), ["a0", "a1", "a2", "a3"])
            left = self.take_all(dlq)
            self.assertEqual([p.message_id for p, _ in left], ["b0", "b1", "b2", "b3"])
            for props, _ in left:
                self.assertNotIn("x-nackguard-replays", props.headers)
                self.assertEqual(props.headers["x-nackguard-returns"], 6)

    def wait_count(self, queue, expected):
        """The queue's ready count once it is `expected` (a quorum queue counts requeued
        messages as ready a moment after the run), or as it is after 10 s."""
        return waiting.poll(lambda: self.count(queue), lambda n: n == expected, 10)

    def test_quorum_queues_dry_runs_warn_of_returns_then_one_source_moves(self):
        # A quorum DLQ as nackguard declares it (on 4.x without a delivery limit): every dry
        # run puts each message back once (basic.nack with requeue), and on 3.10 and 4.0 the
        # quorum queue counts it. From the 11th run on, the messages carry x-delivery-count 10
        # and the summary warns. RabbitMQ 4.3 counts no nack in x-delivery-count (only
        # rejects and crashes): the messages never carry one, and nothing warns.
        counted = harness.broker_counts_nacks()
        arguments = {"x-queue-type": "quorum"}
        if harness.broker_version() >= (4,):
            arguments["x-delivery-limit"] = -1
        with self.queues(to_arguments={"x-queue-type": "quorum"},
                         dlq_arguments=arguments) as (q, dlq):
            self.publish(dlq, MIX[:3])
            for run in range(10):
                result = replay("--upstream", URL, "--from", dlq, "--to", q, "--dry-run",
                                "--format", "json")
                self.assertExit(result, 0)
                doc = json.loads(result[1])
                self.assertEqual((doc["requeued"], doc["requeued_often_returned"],
                                  doc["most_returns"]), (3, 0, run if counted else 0),
                                 f"run {run + 1}")
            result = replay("--upstream", URL, "--from", dlq, "--to", q, "--dry-run")
            self.assertExit(result, 0)
            if counted:
                self.assertIn("left in " + dlq + " (requeued): 3\nwarning: 3 of them returned "
                              "10 times or more (x-delivery-count up to 10): on RabbitMQ 4.0 "
                              "to 4.2", result[1])
            else:
                self.assertIn("left in " + dlq + " (requeued): 3\n", result[1])
                self.assertNotIn("warning:", result[1])
            self.assertEqual(self.wait_count(dlq, 3), 3)
            # Then a real run moves one source between the two quorum queues, in order.
            result = replay("--upstream", URL, "--from", dlq, "--to", q, "--where",
                            "header:source_id=A")
            self.assertExit(result, 0)
            self.assertIn("moved: 2\n", result[1])
            self.assertEqual(self.wait_count(dlq, 1), 1)
            self.assertEqual(self.ids(q), ["a0", "a1"])
            self.assertEqual(self.ids(dlq), ["b0"])

    def test_since_leaves_the_older_ones(self):
        with self.queues() as (q, dlq):
            now = datetime.datetime.utcnow().replace(microsecond=0)
            lasts = [now - datetime.timedelta(days=3), now - datetime.timedelta(minutes=10),
                     now - datetime.timedelta(days=2), now - datetime.timedelta(hours=1)]
            self.publish(dlq, MIX[:4], last_returns=lasts)
            result = replay("--upstream", URL, "--from", dlq, "--to", q, "--since", "1d")
            self.assertExit(result, 0)
            self.assertIn("moved: 2\n", result[1])
            self.assertEqual(self.ids(q), ["b0", "b1"])
            self.assertEqual(self.ids(dlq), ["a0", "a1"])


if __name__ == "__main__":
    unittest.main()
