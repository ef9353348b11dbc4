# ctest-variants: rmq43
"""`nackguard replay` against the three-node RabbitMQ 3.10 cluster (4.3's in the rmq43 variant;
tests/rabbitmq-cluster.sh, the cluster test_cluster uses, one module at a time under its
lock): the DLQ and the target are quorum queues replicated on the three nodes, and the replay
connects to a node that holds the leader of neither.

- 12 dead letters from two sources (source_id A and B, alternating) in Q.dlq, published
  through c1: `--where header:source_id=A` moves exactly the 6 A messages to Q, in order, each
  with x-nackguard-replays 1 and no x-nackguard-returns; the 6 B messages stay in Q.dlq, in
  order, untouched; a second run with the same --where moves 0.
"""

import sys
import unittest
import uuid

import pika

import cluster_support as cs
import harness
from replay_support import replay


def setUpModule():
    seconds, _ = cs.start_cluster()
    print(f"\ncluster ready after {seconds:.1f} s", file=sys.stderr)


def tearDownModule():
    cs.stop_cluster()


class ClusterReplayTest(unittest.TestCase):

    def setUp(self):
        cs.ensure_all_running()
        cs.use_node(cs.NODES[0])
        self.conn = harness.connect(cs.NODES[0].port)
        self.addCleanup(harness.close_connection, self.conn)
        self.channel = self.conn.channel()
        self.channel.confirm_delivery()

    def quorum_pair(self):
        name = f"nackguard-it.cluster-replay.{uuid.uuid4().hex[:10]}"
        for queue in (name, name + ".dlq"):
            self.channel.queue_declare(queue, durable=True, arguments=cs.QUORUM_ARGS)
            self.addCleanup(harness.delete_queue, queue, cs.NODES[0].port)
        return name, name + ".dlq"

    def take_all(self, queue, via):
        conn = harness.connect(via.port)
        try:
            channel = conn.channel()
            taken = []
            while True:
                method, props, body = channel.basic_get(queue, auto_ack=True)
                if method is None:
                    return taken
                taken.append((props, body))
        finally:
            harness.close_connection(conn)

    def test_where_through_a_follower_moves_one_source_in_order(self):
        q, dlq = self.quorum_pair()
        ids = []
        for i in range(12):
            source = "AB"[i % 2]
            message_id = f"{source}-{i}"
            ids.append(message_id)
            self.channel.basic_publish("", dlq, message_id.encode(), pika.BasicProperties(
                message_id=message_id, delivery_mode=2,
                headers={"source_id": source, "x-nackguard-reason": "max_redeliveries",
                         "x-nackguard-returns": 6}))
        leaders = {cs.queue_leader(q, cs.NODES[0]), cs.queue_leader(dlq, cs.NODES[0])}
        follower = next(node for node in cs.NODES if node not in leaders)
        url = f"amqp://guest:guest@127.0.0.1:{follower.port}/%2F"

        status, out, err = replay("--upstream", url, "--from", dlq, "--to", q,
                                  "--where", "header:source_id=A")
        self.assertEqual(status, 0, f"{out}\n{err}")
        self.assertIn("moved: 6\n", out)
        self.assertIn("not selected (outside --where, --since or --until; left in "
                      f"{dlq}): 6\n", out)
        status, out, err = replay("--upstream", url, "--from", dlq, "--to", q,
                                  "--where", "header:source_id=A")
        self.assertEqual(status, 0, f"{out}\n{err}")
        self.assertIn("moved: 0\n", out)

        other = next(node for node in cs.NODES if node != follower)
        moved = self.take_all(q, other)
        self.assertEqual([props.message_id for props, _ in moved],
                         [i for i in ids if i.startswith("A")])
        for props, body in moved:
            self.assertEqual(body, props.message_id.encode())
            self.assertEqual(props.headers["x-nackguard-replays"], 1)
            self.assertNotIn("x-nackguard-returns", props.headers)
            self.assertEqual(props.headers["source_id"], "A")
        left = self.take_all(dlq, other)
        self.assertEqual([props.message_id for props, _ in left],
                         [i for i in ids if i.startswith("B")])
        for props, _ in left:
            self.assertEqual(props.headers["x-nackguard-returns"], 6)
            self.assertNotIn("x-nackguard-replays", props.headers)


if __name__ == "__main__":
    unittest.main()
