# ctest-variants: rmq43 rmq43.quorum
"""Running nackguard: reload, drain and logs, end to end.

Every test starts its own proxy process (operations_support.OpsProxy) with its own config
(free ports for listen and metrics) and its own policy directory, in front of the private
RabbitMQ node (NACKGUARD_TEST_BROKER_PORT); /metrics is parsed as the Prometheus text
format 0.0.4 by operations_support.parse_metrics, which checks the format as it goes.
Metrics and health endpoints (1-4, 8) are tested in test_operations.py.

5. SIGHUP: policy 5 -> 2 applies to a new poison (3 deliveries), a connection opened before
   the reload keeps working; a corrupted policy file keeps 2 in force, logs the file:line
   error, and policy_reloads_total is ok 1 / error 1; a later reload applies log.level.
   5b: a config file that does not load counts as a failed reload; a key that needs a
   restart (threads) is logged as such on reload, while shutdown.grace applies at once.
6. SIGTERM with shutdown.grace 2s: /readyz 503 and new connections refused during the grace,
   the consumer gets connection.close 320 after ~2 s, exit 0 within grace + 3 s; a client
   that leaves by itself lets the proxy exit before the grace ends; a second SIGTERM exits
   at once with code 1 (6a-6c). 6d: a client that never answers the connection.close (it
   reads nothing, heartbeats off) does not keep the proxy from exiting.
7. log.format json: every stderr line is a JSON object with time, level, msg; one
   "dead-lettered" line per dead-letter with queue, identity, returns, reason; neither a
   message body nor a password appears anywhere in the output (log.level debug).
   7b: a message_id with quotes, a newline or bytes that are not UTF-8 still gives lines
   that are UTF-8 JSON.
"""

import re
import signal
import socket
import time
import unittest
import uuid

import pika
from pika.exceptions import AMQPConnectionError, ConnectionClosedByBroker

import harness
import operations_support as ops
import redelivery_support as rs
from operations_support import immediate_policy
from redelivery_support import props

SHUTDOWN_TEXT = "CONNECTION_FORCED - nackguard is shutting down"


# Reloads on SIGHUP alone, not on a change to a watched file.
SIGHUP_ONLY = {"reload": {"watch": False}}


class OperationsLifecycleTest(ops.OpsTest):

    # ------------------------------------------------------------ 5. reload

    def test_5_reload_policies(self):
        queue = self.queue_name("reload")
        # reload.watch false: the files are written in place, and a watched change would be a
        # reload of its own (test_reload_watch tests those).
        proxy = self.start_ops({"q.yaml": immediate_policy(queue, max_redeliveries=5)},
                               config=SIGHUP_ONLY)
        self.broker.declare(queue)
        # A connection opened before the reload, used after it.
        consumer = self.consumer(proxy, queue, lambda d: "nack", prefetch=10)
        consumer.poll(0.2)

        proxy.write_policy("q.yaml", immediate_policy(queue, max_redeliveries=2))
        proxy.signal(signal.SIGHUP)
        page = proxy.wait_metric("nackguard_policy_reloads_total", 1, result="ok")
        self.assertEqual(page.value("nackguard_policy_reloads_total", result="ok"), 1)
        self.assertEqual(len(proxy.wait_log("reload: 1 policies loaded from")), 1)

        first = "first-" + uuid.uuid4().hex
        self.broker.publish(queue, [(b"first", props(message_id=first))])
        self.assertTrue(rs.poll_until([consumer], lambda: self.dlq_count(queue) >= 1, timeout=15,
                                      quiet=0.3), "the first poison was not dead-lettered")
        self.assertEqual(consumer.delivered("first"), 3, "deliveries after the reload to 2")
        self.assertTrue(consumer.ch.is_open and consumer.conn.is_open,
                        "the connection opened before the reload was closed")

        # A corrupted policy file: the reload fails, the previous policies stay.
        proxy.write_policy("q.yaml", f"queue: {queue}\nmax_redeliveries: lots\n")
        proxy.signal(signal.SIGHUP)
        page = proxy.wait_metric("nackguard_policy_reloads_total", 1, result="error")
        self.assertEqual((page.value("nackguard_policy_reloads_total", result="ok"),
                          page.value("nackguard_policy_reloads_total", result="error")), (1, 1))
        failed = proxy.wait_log("reload failed, the previous policies stay in force: ")
        self.assertEqual(len(failed), 1, f"reload failure lines: {failed}")
        self.assertIn(f"{proxy.policy_path('q.yaml')}:2:", failed[0])
        self.assertIn("max_redeliveries", failed[0])

        second = "second-" + uuid.uuid4().hex
        self.broker.publish(queue, [(b"second", props(message_id=second))])
        self.assertTrue(rs.poll_until([consumer], lambda: self.dlq_count(queue) >= 2, timeout=15,
                                      quiet=0.3), "the second poison was not dead-lettered")
        self.assertEqual(consumer.delivered("second"), 3,
                         "deliveries after the failed reload (2 should still apply)")
        self.assertTrue(consumer.ch.is_open and consumer.conn.is_open)
        dead = proxy.log_lines(f"dead-lettered: queue={queue} ")
        self.assertEqual(len(dead), 2, f"dead-lettered lines: {dead}")
        self.assertIn(f"identity=message_id:{first} returns=3 reason=max_redeliveries", dead[0])
        self.assertIn(f"identity=message_id:{second} returns=3 reason=max_redeliveries", dead[1])

        # A good file again, with log.level warn: the reload applies the level, so its own
        # "policies loaded" info line is not written.
        proxy.write_policy("q.yaml", immediate_policy(queue, max_redeliveries=2))
        proxy.config["log"] = {"level": "warn"}
        proxy.write_config()
        proxy.signal(signal.SIGHUP)
        page = proxy.wait_metric("nackguard_policy_reloads_total", 2, result="ok")
        self.assertEqual(page.value("nackguard_policy_reloads_total", result="ok"), 2)
        # A reload writes its "policies loaded" line (flushed: the log flushes every info
        # line) before it counts itself in the metric: had it been written, it is there now.
        self.assertEqual(len(proxy.log_lines("reload: 1 policies loaded from")), 1,
                         "an info line was written after log.level warn was reloaded")
        self.assertTrue(consumer.close())
        self.assert_proxy_alive(proxy)

    def test_5b_reload_names_keys_that_need_a_restart(self):
        proxy = self.start_ops(config={"shutdown": {"grace": "2s"}, **SIGHUP_ONLY})
        # A config file that does not load: the reload fails as a whole.
        with open(proxy.config_path, "a") as f:
            f.write("no_such_key: 1\n")
        proxy.signal(signal.SIGHUP)
        page = proxy.wait_metric("nackguard_policy_reloads_total", 1, result="error")
        self.assertEqual(page.value("nackguard_policy_reloads_total", result="error"), 1)
        failed = proxy.wait_log("reload failed, the previous policies stay in force: ")
        self.assertEqual(len(failed), 1, f"reload failure lines: {failed}")
        self.assertIn(f"{proxy.config_path}:", failed[0])
        self.assertIn("no_such_key", failed[0])
        proxy.config["threads"] = 1
        proxy.config["shutdown"] = {"grace": "5s"}
        proxy.write_config()
        proxy.signal(signal.SIGHUP)
        page = proxy.wait_metric("nackguard_policy_reloads_total", 1, result="ok")
        self.assertEqual(page.value("nackguard_policy_reloads_total", result="ok"), 1)
        proxy.wait_log("reload: 0 policies loaded from")
        lines = proxy.log_lines(f"reload: threads changed in {proxy.config_path} but takes "
                                "effect only after a restart")
        self.assertEqual(len(lines), 1, f"no restart warning for threads after changing it and "
                                        f"SIGHUP; reload lines: {proxy.log_lines('reload')}")
        # shutdown.grace is read when a shutdown begins, so a reload applies it: no warning.
        self.assertEqual(proxy.log_lines("reload: shutdown"), [])

    # ------------------------------------------------------------ 6. drain

    def drain_proxy(self, grace):
        queue = self.queue_name("drain")
        proxy = self.start_ops(config={"shutdown": {"grace": grace}})
        self.broker.declare(queue)
        consumer = self.consumer(proxy, queue, lambda d: "ack", prefetch=10)
        consumer.poll(0.1)
        return proxy, consumer

    def test_6a_drain_closes_clients_after_the_grace(self):
        proxy, consumer = self.drain_proxy("2s")
        self.assertEqual(proxy.get("/readyz")[0], 200)
        t0 = time.monotonic()
        proxy.signal(signal.SIGTERM)
        consumer.poll(0.3)
        status, _, body = proxy.get("/readyz")
        self.assertEqual((status, body), (503, "not ready: draining: shutting down\n"),
                         "/readyz during the grace")
        self.assertEqual(proxy.get("/healthz")[0], 200, "/healthz during the grace")
        with self.assertRaises(ConnectionRefusedError,
                               msg="a new TCP connection was accepted during the grace"):
            socket.create_connection(("127.0.0.1", proxy.port), timeout=2).close()
        with self.assertRaises(AMQPConnectionError):
            harness.connect(proxy.port)
        closed = None
        while time.monotonic() - t0 < 8:
            try:
                consumer.poll(0.05)
            except ConnectionClosedByBroker as exc:
                closed = (time.monotonic() - t0, exc.reply_code, exc.reply_text)
                break
        self.assertIsNotNone(closed, "the consumer was not closed within 8 s of SIGTERM")
        self.assertEqual(closed[1:], (320, SHUTDOWN_TEXT))
        self.assertTrue(1.5 <= closed[0] <= 5.0,
                        f"closed {closed[0]:.2f} s after SIGTERM (grace 2 s)")
        code = proxy.wait_exit(max(0.1, t0 + 5.0 - time.monotonic()))
        self.assertEqual(code, 0, "exit code (None: still running 5 s after SIGTERM)")
        self.assertEqual(len(proxy.log_lines("clients get 2000 ms to leave")), 1)
        self.assertEqual(len(proxy.log_lines("nackguard stopped")), 1)

    def test_6b_drain_ends_when_the_last_client_leaves(self):
        proxy, consumer = self.drain_proxy("10s")
        t0 = time.monotonic()
        proxy.signal(signal.SIGINT)  # SIGINT drains like SIGTERM
        consumer.poll(0.3)
        self.assertTrue(proxy.alive(), "exited at once with a client connected")
        self.assertEqual(proxy.get("/readyz")[0], 503)
        self.assertTrue(consumer.close(), "the client's own close during the grace failed")
        code = proxy.wait_exit(3.0)
        elapsed = time.monotonic() - t0
        self.assertEqual(code, 0, "exit code (None: still running 3 s after SIGINT, grace 10 s)")
        self.assertLess(elapsed, 3.5)
        self.assertEqual(len(proxy.log_lines("signal 2: no new connections; clients get 10000 ms")),
                         1)

    def test_6c_second_signal_exits_at_once(self):
        proxy, consumer = self.drain_proxy("10s")
        proxy.signal(signal.SIGTERM)
        consumer.poll(0.5)
        self.assertTrue(proxy.alive(), "exited before the grace with a client connected")
        t1 = time.monotonic()
        proxy.signal(signal.SIGTERM)
        code = proxy.wait_exit(2.0)
        self.assertEqual(code, 1, "exit code after a second SIGTERM (None: still running 2 s "
                                  "later)")
        self.assertLess(time.monotonic() - t1, 1.0)
        self.assertEqual(len(proxy.log_lines("second signal 15: exiting at once")), 1)

    def test_6d_a_client_that_never_answers_the_close_does_not_block_the_exit(self):
        """A consumer stuck in a long callback (it reads nothing, and heartbeats are off)
        never answers connection.close; the drain must still end."""
        queue = self.queue_name("drain-stuck")
        proxy = self.start_ops(config={"shutdown": {"grace": "2s"}})
        self.broker.declare(queue)
        stuck = harness.connect(proxy.port, heartbeat=0)
        self.addCleanup(harness.close_connection, stuck, 1.0)
        stuck.channel().basic_consume(queue, lambda *args: None)
        t0 = time.monotonic()
        proxy.signal(signal.SIGTERM)
        # From here on the client reads nothing, as if busy with one message.
        code = proxy.wait_exit(12.0)
        elapsed = time.monotonic() - t0
        self.assertEqual(code, 0,
                         f"exit code (None: still running {elapsed:.1f} s after SIGTERM with "
                         "shutdown.grace 2s; it waits for a connection.close-ok that never "
                         "comes)")

    # ------------------------------------------------------------ 7. JSON logs

    def test_7_json_logs_without_bodies_or_passwords(self):
        if harness.RABBITMQCTL is None:
            self.skipTest("NACKGUARD_TEST_RABBITMQCTL is not set")
        queue = self.queue_name("logs")
        secret = "S3cret-" + uuid.uuid4().hex
        wrong = "Wr0ng-" + uuid.uuid4().hex
        user = f"nackguard-ops-logs-{uuid.uuid4().hex[:8]}"  # this run's own, as in test_operations
        ops.add_user(user, secret)
        self.addCleanup(lambda: harness.rabbitmqctl("delete_user", user))
        proxy = self.start_ops({"q.yaml": immediate_policy(queue, max_redeliveries=1)},
                               config={"log": {"level": "debug", "format": "json"}})
        self.broker.declare(queue)
        body_mark = "BodyMark-" + uuid.uuid4().hex
        by_id = "poison-" + uuid.uuid4().hex
        poison_a = f"{body_mark}-a"
        poison_b = f"{body_mark}-b"  # no message_id: identified by a hash of the body
        messages = [(f"{body_mark}-good-{i}".encode(), props(message_id=f"good-{i}"))
                    for i in range(5)]
        messages.insert(2, (poison_a.encode(), props(message_id=by_id)))
        messages.append((poison_b.encode(), props()))
        self.broker.publish(queue, messages)

        with self.assertRaises(AMQPConnectionError):
            harness.connect(proxy.port, credentials=pika.PlainCredentials(user, wrong))
        consumer = self.consumer(
            proxy, queue, lambda d: "nack" if d.label in (poison_a, poison_b) else "ack",
            credentials=pika.PlainCredentials(user, secret))
        self.assertTrue(rs.poll_until([consumer], lambda: self.dlq_count(queue) >= 2, timeout=15,
                                      quiet=0.3), "the poisons were not dead-lettered")
        self.assertTrue(consumer.close())
        self.assertEqual(proxy.stop(), 0)

        records = ops.log_json_lines(proxy.full_log())
        self.assertGreater(len(records), 3)
        for n, record in enumerate(records, start=1):
            self.assertTrue({"time", "level", "msg"} <= set(record),
                            f"log line {n} lacks time, level or msg: {record}")
            self.assertRegex(record["time"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
            self.assertIn(record["level"], ("trace", "debug", "info", "warning", "error",
                                            "critical"))
            self.assertIsInstance(record["msg"], str)
        self.assertTrue(any(r["level"] == "debug" for r in records), "no debug line at debug")
        dead = [r for r in records if "dead-lettered" in r["msg"]]
        self.assertEqual(len(dead), 2, f"dead-lettered lines: {dead}")
        by_identity = [r for r in dead if f"identity=message_id:{by_id} " in r["msg"]]
        self.assertEqual(len(by_identity), 1, f"dead-lettered lines: {dead}")
        self.assertRegex(by_identity[0]["msg"],
                         rf"^dead-lettered: queue={re.escape(queue)} "
                         rf"identity=message_id:{re.escape(by_id)} returns=2 "
                         r"reason=max_redeliveries id=[0-9a-f]{12}$")
        self.assertEqual(by_identity[0]["level"], "warning")
        by_body = [r for r in dead if r is not by_identity[0]][0]
        self.assertRegex(by_body["msg"], rf"^dead-lettered: queue={re.escape(queue)} "
                                         r"identity=body:\S+ returns=2 reason=max_redeliveries "
                                         r"id=[0-9a-f]{12}$")
        raw = proxy.full_log_bytes() + proxy.stdout_text().encode()
        self.assertNotIn(body_mark.encode(), raw, "a message body is in the log")
        self.assertNotIn(secret.encode(), raw, "the password is in the log")
        self.assertNotIn(wrong.encode(), raw, "a wrong password is in the log")
        self.assertEqual(proxy.stdout_text(), "", "nackguard wrote to stdout")

    def test_7b_json_logs_stay_json_for_any_message_id(self):
        """An AMQP shortstr is arbitrary bytes: a message_id that is not UTF-8, or holds a
        quote, a backslash or a newline, still gives one valid JSON object (UTF-8) per line."""
        queue = self.queue_name("logs-bytes")
        proxy = self.start_ops({"q.yaml": immediate_policy(queue, max_redeliveries=1)},
                               config={"log": {"format": "json"}})
        self.broker.declare(queue)
        odd_ids = [b'quote-"-backslash-\\-newline-\n-tab-\t-end',
                   b"latin1-caf\xe9-bytes-\xff\xfe-end"]
        self.broker.publish(queue, [(f"odd-{i}".encode(), props(message_id=mid))
                                    for i, mid in enumerate(odd_ids)])
        consumer = self.consumer(proxy, queue, lambda d: "nack")
        self.assertTrue(rs.poll_until([consumer], lambda: self.dlq_count(queue) >= 2, timeout=15,
                                      quiet=0.3), "the messages were not dead-lettered")
        self.assertTrue(consumer.close())
        self.assertEqual(proxy.stop(), 0)
        raw = proxy.full_log_bytes()
        records = []
        for n, line in enumerate(raw.split(b"\n")[:-1], start=1):
            with self.subTest(line=n):
                try:
                    text = line.decode("utf-8")
                except UnicodeDecodeError as exc:
                    self.fail(f"log line {n} is not UTF-8 ({exc}), so not JSON (RFC 8259 "
                              f"section 8.1): {line!r}")
                records.extend(ops.log_json_lines(text))
        dead = [r["msg"] for r in records if r["msg"].startswith("dead-lettered:")]
        # Each ends with the message's short id (as /status shows it), left out below.
        self.assertTrue(all(re.search(r" id=[0-9a-f]{12}$", d) for d in dead), dead)
        dead = [re.sub(r" id=[0-9a-f]{12}$", "", d) for d in dead]
        # Control characters from a client are written as \xNN: a message id cannot split or
        # forge a log line; bytes that are not UTF-8 become U+FFFD.
        self.assertIn(f"dead-lettered: queue={queue} identity=message_id:"
                      'quote-"-backslash-\\-newline-\\x0a-tab-\\x09-end returns=2 '
                      "reason=max_redeliveries", dead)
        self.assertIn(f"dead-lettered: queue={queue} identity=message_id:"
                      "latin1-caf\ufffd-bytes-\ufffd\ufffd-end returns=2 "
                      "reason=max_redeliveries", dead)


if __name__ == "__main__":
    unittest.main()
