# ctest-variants: rmq43
"""nackguard in front of a real three-node RabbitMQ 3.10 cluster (issue 11, section 4), and
of a 4.3 one in the rmq43 variant (cluster_support: nodes nackguard-c1-43..c3-43).

The cluster (tests/rabbitmq-cluster.sh: nodes nackguard-c1..c3 on 23672/23772/23872, joined
with rabbitmqctl join_cluster) is started once for this module and stopped at its end. Every
queue here is a quorum queue replicated on the three nodes (x-quorum-initial-group-size 3),
published to directly with confirms; every nackguard lists the three nodes in
upstream.addresses, and its upstream_connections gauge says which node serves a connection.

0. six client connections through one nackguard: two upstream connections on each node (its
   upstream_connections gauge and the broker's list_connections agree), none failed.
a. failover: a consumer (prefetch 50) acks 2,000 messages; when it has acked 500, the node
   serving its upstream connection is stopped. It gets connection.close 320, reconnects through
   the same nackguard to a live node and gets every remaining message: all 2,000 acked, at
   most the prefetch duplicated, the queue empty.
a2. the same with the serving node SIGKILLed (300 messages): nackguard itself closes the
   client with 320 ("the broker connection was lost"), and the reconnect goes to a live node.
b. the limit holds: max_redeliveries 4, a poison nacked with requeue every time. After its
   second nack (the consumer cancelled first, so it waits in the queue) the node serving the
   upstream connection is stopped; the consumer reconnects, to another node, and the poison
   is delivered exactly 5 times in all, then it is in <queue>.dlq and not in the queue.
   b2: held (unsettled) when its node is stopped instead, that return is the broker's, not
   the consumer's, and is not counted: exactly 6 deliveries, then the DLQ.
c. a delayed copy survives its node: requeue delayed, backoff 10 s, queue_type quorum. The
   node holding the delay queue's leader is stopped while the copy waits; the copy comes back
   from another node 10 s after the nack (less than 8 s late), once, and is acked.
d. all nodes down: the consumer gets connection.close 320, /readyz answers 503 naming the
   three addresses, a new client is closed at once without a byte (raw TCP: EOF; pika:
   AMQPConnectionError) and each such client counts once in upstream_unavailable_total.
   Node c1 comes back (on 4.3 c1 and c2: a Khepri node boots only beside a majority):
   /readyz 200 and a client's round trip works, the same nackguard process throughout.

Case (c) needs the policy key queue_type and quorum delay queues (issue 11, section 1).
"""

import collections
import json
import socket
import sys
import threading
import time
import unittest
import uuid

from pika.exceptions import AMQPConnectionError, ConnectionClosedByBroker

import cluster_support as cs
import harness
import redelivery_support as rs
from redelivery_support import NO_RATE_LIMITS, props

PREFETCH = 50
TOTAL = 2000
FORCED = 320  # CONNECTION_FORCED


def setUpModule():
    # c3's first join fails half way (stop_app and join_cluster done, start_app not), as a
    # join did in CI: the cluster script wipes it and joins it again.
    seconds, output = cs.start_cluster(fail_join=cs.NODES[2])
    print(f"\ncluster {', '.join(n.address for n in cs.NODES)} ready after {seconds:.1f} s",
          file=sys.stderr)
    if "reusing it" not in output:  # a cluster left running by an earlier run has no joins
        expected = f"node {cs.NODES[2].name} did not join at the first try"
        if expected not in output:
            raise AssertionError(f"the cluster script did not say {expected!r}:\n{output}")


def tearDownModule():
    cs.stop_cluster()


class FailoverTest(cs.ClusterTest):

    # ------------------------------------------------------------ 0. the spread

    def test_0_connections_spread_over_the_nodes(self):
        self.broker.close()  # so that the broker lists only the proxy's connections
        proxy = self.start_cluster_proxy({})
        conns = []
        for _ in range(6):
            conn = harness.connect(proxy.port)
            self.addCleanup(harness.close_connection, conn, 3)
            conns.append(conn)
        self.assertEqual(cs.serving_nodes(proxy), {node: 2 for node in cs.NODES})
        # The broker sees the same: two connections on each node's AMQP port.
        rows = json.loads(cs.ctl(cs.NODES[0], "-q", "list_connections", "port",
                                 "--formatter", "json"))
        ports = collections.Counter(row["port"] for row in rows)
        self.assertEqual({node.port: ports[node.port] for node in cs.NODES},
                         {node.port: 2 for node in cs.NODES})
        for conn in conns:
            harness.close_connection(conn)
        self.assertEqual(cs.wait_for(lambda: cs.serving_nodes(proxy) == {}, 3), True,
                         f"upstream connections left open: {cs.serving_nodes(proxy)}")
        page = proxy.metrics()
        self.assertEqual(sum(v for _, v in page.series(
            "nackguard_upstream_connect_failures_total")), 0)

    # ------------------------------------------------------------ a. failover

    def test_a_failover_loses_no_confirmed_message(self):
        queue = self.queue_name("failover")
        self.declare_quorum(queue)
        labels = [f"m-{i:04d}" for i in range(TOTAL)]
        self.broker.publish(queue, [(label.encode(), props(message_id=label, delivery_mode=2))
                                    for label in labels])
        self.assertEqual(self.broker.message_count(queue), TOTAL)
        proxy = self.start_cluster_proxy(
            {"q.yaml": rs.policy_yaml(queue, max_redeliveries=50, rate=NO_RATE_LIMITS)})

        acked = collections.Counter()
        state = {"stopped": None}

        def decide(consumer, delivery):
            acked[delivery[0]] += 1
            return "ack"

        def tick():
            if state["stopped"] is None and len(acked) >= TOTAL // 4:
                self.stop_serving_node(proxy, state)

        consumer = self.consumer(proxy, queue, decide)
        done = consumer.run_until(lambda: len(acked) == TOTAL, timeout=100, tick=tick)
        consumer.poll(1.0)  # a late duplicate would show here
        after = cs.serving_nodes(proxy)
        consumer.close()

        stopped = state["stopped"]
        self.assertIsNotNone(stopped, "the node was never stopped")
        self.assertTrue(done, f"{len(acked)} of {TOTAL} messages acked; reconnect errors: "
                              f"{consumer.connect_errors[-5:]}")
        self.assertEqual(set(acked), set(labels), "a confirmed message was lost")
        duplicates = sum(n - 1 for n in acked.values())
        print(f"\n(a) stopped {stopped} in {state['stop_seconds']:.1f} s; "
              f"{consumer.connects} connections, {duplicates} duplicates, "
              f"{len(consumer.connect_errors)} failed reconnects", file=sys.stderr)
        self.assertLessEqual(duplicates, PREFETCH)
        self.assertGreaterEqual(consumer.connects, 2)
        self.assertEqual(consumer.closes[0][0], FORCED, consumer.closes)
        self.assertNotIn(stopped, after, "the reconnect went to the stopped node")
        self.assertEqual(cs.wait_for(lambda: self.broker.message_count(queue) == 0, 5), True)
        self.assert_proxy_alive(proxy)

    def test_a2_a_killed_node_is_left_for_a_live_one(self):
        # SIGKILL instead of a clean stop: the broker says nothing, nackguard sees its TCP
        # connection end and closes the client with its own connection.close 320.
        total = 300
        queue = self.queue_name("killed")
        self.declare_quorum(queue)
        labels = [f"k-{i:03d}" for i in range(total)]
        self.broker.publish(queue, [(label.encode(), props(message_id=label, delivery_mode=2))
                                    for label in labels])
        proxy = self.start_cluster_proxy(
            {"q.yaml": rs.policy_yaml(queue, max_redeliveries=50, rate=NO_RATE_LIMITS)})
        acked = collections.Counter()
        state = {"killed": None}

        def decide(consumer, delivery):
            acked[delivery[0]] += 1
            return "ack"

        def tick():
            if state["killed"] is None and len(acked) >= total // 3:
                node = self.the_serving_node(proxy)
                state["killed"] = node
                self.reconnect_broker(avoid=[node])
                cs.kill_node(node)
                self.addCleanup(cs.start_node_async, node)

        consumer = self.consumer(proxy, queue, decide, prefetch=PREFETCH)
        done = consumer.run_until(lambda: len(acked) == total, timeout=90, tick=tick)
        consumer.poll(1.0)
        after = cs.serving_nodes(proxy)
        consumer.close()
        self.assertIsNotNone(state["killed"])
        self.assertTrue(done, f"{len(acked)} of {total} acked; {consumer.connect_errors[-5:]}")
        self.assertEqual(set(acked), set(labels))
        self.assertLessEqual(sum(n - 1 for n in acked.values()), PREFETCH)
        self.assertEqual(consumer.closes[0],
                         (FORCED, "CONNECTION_FORCED - nackguard: the broker connection was lost"))
        self.assertNotIn(state["killed"], after)
        self.assertEqual(cs.wait_for(lambda: self.broker.message_count(queue) == 0, 5), True)

    # ------------------------------------------------------------ b. the limit holds

    def test_b_the_limit_holds_across_a_failover(self):
        max_redeliveries = 4
        queue = self.queue_name("limit")
        self.declare_quorum(queue)
        poison_id = "poison-" + uuid.uuid4().hex
        self.broker.publish(queue, [(b"poison", props(message_id=poison_id, delivery_mode=2))])
        proxy = self.start_cluster_proxy({"q.yaml": rs.policy_yaml(
            queue, max_redeliveries=max_redeliveries, rate=NO_RATE_LIMITS)})
        state = {"stopped": None, "idle": False}

        def decide(consumer, delivery):
            if len(consumer.deliveries) == 2 and state["stopped"] is None:
                state["idle"] = True  # nacked and back in the queue, nothing consumes it
                return "cancel-nack"
            return "nack"

        def tick():
            if state["idle"] and state["stopped"] is None:
                self.stop_serving_node(proxy, state)

        consumer = self.consumer(proxy, queue, decide, prefetch=10)
        consumer.run_until(lambda: len(consumer.deliveries) >= max_redeliveries + 1,
                           timeout=60, tick=tick)
        consumer.poll(3.0)  # a further delivery would show here
        after = cs.serving_nodes(proxy)
        consumer.close()

        self.assertIsNotNone(state["stopped"], "the node was never stopped")
        self.assertEqual(consumer.closes[0][0], FORCED, consumer.closes)
        self.assertNotIn(state["stopped"], after, "the reconnect went to the stopped node")
        self.assertEqual(len(consumer.deliveries), max_redeliveries + 1,
                         [(d[0], d[2]) for d in consumer.deliveries])
        dlq = f"{queue}.dlq"
        self.assertEqual(cs.wait_for(lambda: self.broker.message_count(dlq) == 1, 10), True,
                         f"{dlq} holds {self.broker.message_count(dlq)} messages")
        [(_, dead_props, body)] = self.broker.get_all(dlq)
        self.assertEqual((body, dead_props.message_id), (b"poison", poison_id))
        self.assertEqual(self.broker.message_count(queue), 0)

    def test_b2_a_return_caused_by_the_node_is_not_the_consumers(self):
        # The poison's third delivery is held, unsettled, when its node is stopped: the
        # broker takes it back, but no consumer failed it, so nackguard does not count that
        # return (ReturnCause::broker_lost). One delivery more than with nacks only, exactly.
        max_redeliveries = 4
        queue = self.queue_name("held")
        self.declare_quorum(queue)
        poison_id = "poison-" + uuid.uuid4().hex
        self.broker.publish(queue, [(b"poison", props(message_id=poison_id, delivery_mode=2))])
        proxy = self.start_cluster_proxy({"q.yaml": rs.policy_yaml(
            queue, max_redeliveries=max_redeliveries, rate=NO_RATE_LIMITS)})
        state = {"stopped": None, "holding": False}

        def decide(consumer, delivery):
            if len(consumer.deliveries) == 3 and state["stopped"] is None:
                state["holding"] = True
                return None
            return "nack"

        def tick():
            if state["holding"] and state["stopped"] is None:
                self.stop_serving_node(proxy, state)

        consumer = self.consumer(proxy, queue, decide, prefetch=10)
        consumer.run_until(lambda: len(consumer.deliveries) >= max_redeliveries + 2,
                           timeout=60, tick=tick)
        consumer.poll(3.0)
        consumer.close()
        self.assertEqual(consumer.closes[0][0], FORCED, consumer.closes)
        self.assertEqual(len(consumer.deliveries), max_redeliveries + 2,
                         [(d[0], d[2]) for d in consumer.deliveries])
        dlq = f"{queue}.dlq"
        self.assertEqual(cs.wait_for(lambda: self.broker.message_count(dlq) == 1, 10), True)
        self.assertEqual(self.broker.message_count(queue), 0)

    # ------------------------------------------------------------ c. a delayed copy

    def test_c_a_delayed_copy_survives_its_node(self):
        delay_ms = 10000
        queue = self.queue_name("delayed", delay_ttls_ms=(delay_ms,))
        delay_queue = f"nackguard.delay.{queue}.{delay_ms}ms"
        self.declare_quorum(queue)
        policy = rs.policy_yaml(queue, max_redeliveries=5, requeue="delayed",
                                backoff={"initial": "10s", "multiplier": 1, "max": "10s",
                                         "jitter": "none"},
                                rate=NO_RATE_LIMITS) + "queue_type: quorum\n"
        proxy = self.start_cluster_proxy({"q.yaml": policy})
        self.broker.publish(queue, [(b"delayed-1", props(message_id="delayed-1",
                                                         delivery_mode=2))])
        state = {"nacked_at": None}

        def decide(consumer, delivery):
            if state["nacked_at"] is None:
                state["nacked_at"] = time.monotonic()
                return "nack"
            return "ack"

        consumer = self.consumer(proxy, queue, decide, prefetch=10)
        self.assertTrue(consumer.run_until(lambda: state["nacked_at"] is not None, 20))
        # The copy waits in the delay queue once the broker confirmed it.
        self.assertTrue(consumer.run_until(
            lambda: self.broker.message_count(delay_queue) == 1, 5),
            f"the copy is not in {delay_queue}")
        info = cs.queue_info(delay_queue, via=cs.NODES[0])
        self.assertEqual(info["type"], "quorum", info)
        self.assertEqual(len(info["members"]), 3, info)
        leader = cs.node_named(info["leader"])
        self.reconnect_broker(avoid=[leader])
        t0 = time.monotonic()
        cs.stop_node(leader)
        stopped_at = time.monotonic()
        stop_seconds = stopped_at - t0
        self.addCleanup(cs.start_node_async, leader)

        delay = delay_ms / 1000
        due = state["nacked_at"] + delay
        # The copy may come back once it is due and its old leader is gone: a graceful stop
        # took 27 s and 60 s on a loaded CI machine, longer than the delay itself.
        consumer.run_until(lambda: len(consumer.deliveries) >= 2,
                           timeout=max(due, stopped_at) + 30 - time.monotonic())
        consumer.poll(2.0)
        consumer.close()
        self.assertEqual(len(consumer.deliveries), 2,
                         f"deliveries {[d[0] for d in consumer.deliveries]}; the copy did not "
                         f"come back after {leader} (its delay queue's leader) was stopped")
        came_back = consumer.deliveries[1][5]
        late = came_back - due
        after_stop = came_back - max(due, stopped_at)
        print(f"\n(c) stopped {leader} (the delay queue's leader) in {stop_seconds:.1f} s; "
              f"the copy came back {late:+.2f} s from its time, {after_stop:+.2f} s after it "
              f"was due with its old leader stopped", file=sys.stderr)
        self.assertGreater(late, -0.5)
        # Came back while its old leader was still down (it is started again at cleanup). A
        # new leader's election and its TTL check take a few seconds on an idle machine; 13 s
        # was seen with the two cores busy compiling, so the bound only rules out a copy that
        # waited for something else (a restart, a second delay). It counts from the later of
        # the copy's time and the end of the stop: CI's slow stops once made a copy that came
        # back promptly after them look 25 s late.
        self.assertLess(after_stop, 20.0)
        self.assertEqual(consumer.deliveries[1][0], "delayed-1")
        self.assertEqual(self.broker.message_count(queue), 0)
        self.assertFalse(self.broker.message_count(f"{queue}.dlq"))

    # ------------------------------------------------------------ d. all nodes down

    def test_d_all_nodes_down_then_one_comes_back(self):
        proxy = self.start_cluster_proxy({})
        conn = harness.connect(proxy.port)
        self.addCleanup(harness.close_connection, conn, 3)
        conn.channel().queue_declare("", exclusive=True)
        first, others = cs.NODES[0], cs.NODES[1:]

        # The two others at once, then c1: the last node down is the one that can boot alone.
        threads = [threading.Thread(target=cs.stop_node, args=(n,)) for n in others]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        cs.stop_node(first)
        # Left down: this is the last test, and a later one's setUp starts them again.

        with self.assertRaises(ConnectionClosedByBroker) as closed:
            harness.drain(conn, lambda: False, timeout=5)
        self.assertEqual(closed.exception.reply_code, FORCED)

        status, body = proxy.wait_ready(503, 12)
        self.assertEqual(status, 503, body)
        for node in cs.NODES:
            self.assertIn(node.address, body)
        before = proxy.metrics().value("nackguard_upstream_unavailable_total")

        # A raw TCP client: closed without a byte (EOF, not a hang).
        t0 = time.monotonic()
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=8) as raw:
            self.assertEqual(raw.recv(64), b"")
        self.assertLess(time.monotonic() - t0, 5.0)
        # A pika client: its connection attempt fails promptly.
        t0 = time.monotonic()
        with self.assertRaises(AMQPConnectionError):
            harness.close_connection(harness.connect(proxy.port))
        self.assertLess(time.monotonic() - t0, 6.0)
        page = proxy.wait_metric("nackguard_upstream_unavailable_total", before + 2, timeout=3)
        self.assertEqual(page.value("nackguard_upstream_unavailable_total"), before + 2)
        self.assert_proxy_alive(proxy)

        # 3.10 boots its last node down alone. 4.3 keeps its metadata in Khepri, a Raft
        # cluster: a node finishes booting only beside a majority of the members, so two
        # come back (c1 and c2, at once).
        back = [first] if cs.VERSION == "3.10" else [first, others[0]]
        cs.start_nodes(back)
        status, body = proxy.wait_ready(200, 10)
        self.assertEqual(status, 200, body)
        conn = harness.connect(proxy.port)
        self.addCleanup(harness.close_connection, conn, 3)
        ch = conn.channel()
        reply = ch.queue_declare("", exclusive=True).method.queue
        ch.basic_publish("", reply, b"round trip")
        body = cs.wait_for(lambda: ch.basic_get(reply, auto_ack=True)[2], 5)
        self.assertEqual(body, b"round trip")
        serving = cs.serving_nodes(proxy)
        self.assertEqual(sum(serving.values()), 1, serving)
        self.assertIn(next(iter(serving)), back)
        self.assert_proxy_alive(proxy)


if __name__ == "__main__":
    unittest.main()
