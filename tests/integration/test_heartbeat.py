# ctest-variants: rmq43 rmq43.quorum
"""Heartbeats pass through the proxy, and a dead broker side closes the client.

Proves that:
- with pika's heartbeat=1 and 5 s without any traffic but heartbeats, the
  connection through the proxy stays up exactly as it does directly: pika both
  sends and receives heartbeat frames all along (about 2 a second each way), the
  broker still holds the very same connection afterwards (one connection with
  this name, connected before the idle period, heartbeat timeout 1), and a publish
  and a get on it work;
- when the proxy's connection to the broker dies (a TCP relay between a second
  proxy and the broker cuts its broker socket, then closes the proxy's upstream
  socket with a FIN or with a RST), pika's connection through that proxy is
  closed within 3 s instead of hanging, and a new connection through the same
  proxy works.  Directly (the relay in front of the broker, no proxy) the same
  check validates the relay itself.
"""

import concurrent.futures
import json
import time
import unittest
import uuid

import pika.exceptions

import harness
import peers
import waiting

IDLE_SECONDS = 5
MIN_HEARTBEATS = 5   # each way in 5 s; pika and RabbitMQ send one about every 0.5 s
CLOSE_WITHIN = 3.0


def broker_connections(name):
    """The broker's view of the connections whose client connection_name is `name`."""
    out = harness.rabbitmqctl("list_connections", "-q", "--formatter", "json",
                              "name", "client_properties", "connected_at", "timeout")
    found = []
    for row in json.loads(out or "[]"):
        # Another test's raw peer may open a connection whose properties are not
        # [key, type, value] triples: such a row is not ours.
        props = {p[0]: p[2] for p in row.get("client_properties") or []
                 if isinstance(p, list) and len(p) == 3}
        if props.get("connection_name") == name:
            found.append(row)
    return found


def idle_with_heartbeats(target):
    result = {}
    name = f"nackguard-it-heartbeat-{uuid.uuid4().hex[:8]}"
    with harness.unique_queue("heartbeat") as queue:
        conn = harness.connect(target.port, heartbeat=1,
                               client_properties={"connection_name": name})
        try:
            result["negotiated"] = conn._impl.params.heartbeat
            ch = conn.channel()
            harness.declare_queue(ch, queue)
            checker = conn._impl._heartbeat_checker
            idle_start_ms = time.time() * 1000
            conn.sleep(IDLE_SECONDS)
            result["heartbeats_received"] = checker._heartbeat_frames_received
            result["heartbeats_sent"] = checker._heartbeat_frames_sent
            result["open_after_idle"] = conn.is_open and ch.is_open
            ch.basic_publish("", queue, b"after idle")
            method, _, body = harness.get_message(ch, queue)
            result["after_idle"] = (body, method.delivery_tag if method else None)
            if harness.RABBITMQCTL:
                # rabbitmqctl takes seconds: keep servicing the connection meanwhile,
                # or the broker would drop it for missed heartbeats (timeout 1 s)
                with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
                    query = pool.submit(broker_connections, name)
                    while not query.done():
                        conn.process_data_events(time_limit=0.05)
                    seen = query.result()
                result["broker_connections"] = len(seen)
                result["broker_timeout"] = [row["timeout"] for row in seen]
                result["connected_before_idle"] = [row["connected_at"] <= idle_start_ms
                                                   for row in seen]
        finally:
            harness.close_connection(conn)
    return result


class HeartbeatTest(harness.IntegrationTest):

    def check_idle(self, r, target):
        self.assertEqual(r["negotiated"], 1, target)
        self.assertTrue(r["open_after_idle"], f"{target}: connection closed while idle")
        self.assertEqual(r["after_idle"], (b"after idle", 1), target)
        self.assertGreaterEqual(r["heartbeats_received"], MIN_HEARTBEATS,
                                f"{target}: heartbeats pika received in {IDLE_SECONDS}s")
        self.assertGreaterEqual(r["heartbeats_sent"], MIN_HEARTBEATS,
                                f"{target}: heartbeats pika sent in {IDLE_SECONDS}s")
        if "broker_connections" in r:
            self.assertEqual(r["broker_connections"], 1,
                             f"{target}: broker connections with this name after idle")
            self.assertEqual(r["broker_timeout"], [1], target)
            self.assertEqual(r["connected_before_idle"], [True],
                             f"{target}: the broker connection was re-established")

    def test_idle_connection_survives_on_heartbeats(self):
        direct, proxied = self.run_both(idle_with_heartbeats)
        self.check_idle(direct, "direct")
        self.check_idle(proxied, "proxy")
        if not harness.RABBITMQCTL:
            print("note: NACKGUARD_TEST_RABBITMQCTL not set; the broker-side view of the "
                  "connection was not checked")
        stable = ("negotiated", "open_after_idle", "after_idle", "broker_connections",
                  "broker_timeout", "connected_before_idle")
        self.assertSameThroughProxy({k: direct.get(k) for k in stable},
                                    {k: proxied.get(k) for k in stable})

    def client_closed_when_broker_side_dies(self, reset):
        relay = peers.TcpRelay(harness.BROKER_PORT)
        self.addCleanup(relay.stop)
        if harness.DIRECT_ONLY:
            port = relay.port  # validates the relay and the timing check only
        else:
            name = f"relay-proxy-{'rst' if reset else 'fin'}"
            port = self.start_proxy(relay.port, name=name).port
        with harness.unique_queue("relay") as queue:
            conn = harness.connect(port)
            try:
                ch = conn.channel()
                harness.declare_queue(ch, queue)
                ch.basic_publish("", queue, b"before cut")
                self.assertEqual(harness.wait_message_count(ch, queue, 1), 1)
                self.assertTrue(waiting.wait_for(lambda: relay.connection_count() >= 1, 2),
                                "the connection did not go through the relay")
                relay.cut(reset=reset)
                error, elapsed = waiting.connection_failure(
                    conn, pika.exceptions.AMQPConnectionError, CLOSE_WITHIN + 2)
                self.assertIsNotNone(error, f"pika's connection still open {elapsed:.1f}s "
                                            "after its broker side died")
                self.assertIsInstance(error, (pika.exceptions.StreamLostError,
                                              pika.exceptions.ConnectionClosed))
                if isinstance(error, pika.exceptions.ConnectionClosedByBroker):
                    self.assertEqual(error.reply_code, 320, f"closed with {error!r}")
                self.assertLess(elapsed, CLOSE_WITHIN, f"closed only after {elapsed:.2f}s")
                self.assertTrue(conn.is_closed)
            finally:
                harness.close_connection(conn)

            # the proxy (and the relay) still serve a new connection
            conn = harness.connect(port)
            try:
                ch = conn.channel()
                method, _, body = ch.basic_get(queue, auto_ack=True)
                self.assertEqual((body, method and method.message_count), (b"before cut", 0))
            finally:
                harness.close_connection(conn)

    def test_client_closed_when_broker_side_closes_fin(self):
        self.client_closed_when_broker_side_dies(reset=False)

    def test_client_closed_when_broker_side_resets(self):
        self.client_closed_when_broker_side_dies(reset=True)


if __name__ == "__main__":
    unittest.main()
