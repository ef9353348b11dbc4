"""/status.json and `nackguard status`, end to end (issue 15 part 1).

Every test starts its own proxy (operations_support.OpsProxy) with a policy `requeue:
immediate` and no rate limits on its own queue, publishes a poison message (message_id
"poison-<uuid>", a body with a unique marker) among good ones, and lets
status_support.LoopingConsumer nack the poison an exact number of times; then it is
settled (the poison's next delivery held unsettled, the good ones acked) and the counts
are exact.

1. /status.json after 40 nacks under max_redeliveries 1000: one top entry for the queue,
   with the id the proxy derives (XXH3-128 of queue, NUL, identity), returns 40, deliveries
   40, next requeue at the next return, no identity; the queue's row (window and total):
   returns 40, what became of them and the deliveries as the counting model has them
   (docs/choosing-a-policy.md, "How nackguard counts": see expected_counts), and the
   delivery limit in force (none learnt: the assumed 2); limits: one tracker entry,
   client_connections 2 (the publisher and the consumer, both through the proxy); config:
   no reload yet. 1b: max_redeliveries 3 and 3 nacks: next is dead_letter
   (max_redeliveries) at the next return, and the next return does dead-letter it.
2. Privacy: with metrics.show_identities false, neither the message_id, the body marker
   nor the consumer's password (a user with a unique password) is in /status.json, /status
   or `nackguard status`. show_identities true in the config and SIGHUP: reloads ok goes
   up by exactly one, last_reload ok; once the poison returns again, its entry's identity
   is "message_id:<message_id>"; the body and the password are still nowhere.
3. `nackguard status --url http://127.0.0.1:PORT`: exit 0, the TOP row (queue, #id,
   returns, deliveries) and the QUEUES row; a closed port: exit 1, "cannot connect";
   --interval 0: exit 2; --watch --interval 1 for ~3.5 s clears the screen at least twice.
4. A corrupt policy file and SIGHUP: last_reload error with a message naming the file,
   reloads error up by exactly one, the policy in force unchanged.
"""
# ctest-variants: quorum rmq40 rmq40.quorum rmq43 rmq43.quorum

import signal
import subprocess
import time
import uuid

import pika

import harness
import operations_support as ops
import redelivery_support as rs
import status_support as st
from redelivery_support import NO_RATE_LIMITS, props

GOODS = 5
CLEAR = "\x1b[H\x1b[2J"
ISO_MS = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$"


def immediate_policy(queue, max_redeliveries):
    return rs.policy_yaml(queue, max_redeliveries=max_redeliveries, requeue="immediate",
                          rate=NO_RATE_LIMITS)


def expected_counts(nacks):
    """(deliveries of the poison the proxy saw, returns forwarded, republished) after `nacks`
    nacks of the poison under `requeue: immediate`, its next delivery held
    (docs/choosing-a-policy.md, "How nackguard counts").

    On a classic queue the first return since a copy is forwarded (the redelivered flag
    carries it) and the next one is republished with its count: they alternate, forwarded
    first. The consumer got every delivery: nacks + 1.
    On a quorum queue only the original's first return is forwarded: a copy there is exact
    (x-nackguard-exact), and every return of it is a copy. On 3.10 and 4.0 a nack counts in
    x-delivery-count, and under the assumed delivery limit (2: no management API, no
    broker_delivery_limit) the original's redelivery is republished before the consumer sees
    it: one delivery more, and every return from the first on a copy (nacks republished).
    On 4.3 a nack does not count there: the consumer gets the redelivered original, and
    returns 2 to `nacks` are copies."""
    if harness.QUEUE_TYPE != "quorum":
        return nacks + 1, nacks - nacks // 2, nacks // 2
    if harness.broker_counts_nacks():
        return nacks + 2, 1, nacks
    return nacks + 1, 1, nacks - 1


class StatusTest(ops.OpsTest):

    # ------------------------------------------------------------ helpers

    def start_scenario(self, tag, max_redeliveries, nacks, config=None, credentials=None):
        """A proxy, a queue with GOODS good messages and a poison, published through the
        proxy (the publisher's connection stays open), and a consumer that nacks the poison
        `nacks` times and is then settled. Returns a dict of what the test checks against."""
        queue = self.queue_name(tag)
        proxy = self.start_ops({"q.yaml": immediate_policy(queue, max_redeliveries)},
                               config=config)
        self.broker.declare(queue)
        poison_id = "poison-" + uuid.uuid4().hex
        marker = "BodyMark-" + uuid.uuid4().hex
        overrides = {} if credentials is None else {"credentials": credentials}
        publisher = harness.connect(proxy.port, **overrides)
        self.addCleanup(harness.close_connection, publisher)
        channel = publisher.channel()
        channel.confirm_delivery()
        for i in range(GOODS):
            channel.basic_publish("", queue, f"{marker}-good-{i}".encode(),
                                  props(message_id=f"good-{i}"), mandatory=True)
        channel.basic_publish("", queue, f"{marker}-poison".encode(),
                              props(message_id=poison_id), mandatory=True)
        consumer = st.LoopingConsumer(proxy.port, queue, poison_id, interval=0.02,
                                      max_nacks=nacks, credentials=credentials)
        self.addCleanup(consumer.close)
        consumer.start()
        counts = consumer.wait_settled(acks=GOODS, timeout=60)
        self.assertEqual(counts, (nacks, GOODS + nacks + 1, nacks + 1, GOODS, 1),
                         "(nacks, deliveries, poison deliveries, acks, held)")
        return {"queue": queue, "proxy": proxy, "poison_id": poison_id, "marker": marker,
                "consumer": consumer, "id": st.short_id(queue, f"message_id:{poison_id}")}

    def wait_returns(self, proxy, queue, returns, timeout=10.0):
        """/status.json once the queue's only top entry has `returns`; asserts there is
        exactly one entry."""
        doc = st.wait_status(proxy, lambda d: [e["returns"] for e in st.top_entries(d, queue)]
                             == [returns], timeout=timeout)
        entries = st.top_entries(doc, queue)
        self.assertEqual(len(entries), 1, f"top entries of {queue}: {doc['top']}")
        self.assertEqual(entries[0]["returns"], returns, f"top entry: {entries[0]}")
        return doc, entries[0]

    def run_cli(self, *args, timeout=20):
        return subprocess.run([harness.PROXY_BIN, "status", *args], capture_output=True,
                              text=True, timeout=timeout)

    def cli_text(self, proxy):
        result = self.run_cli("--url", f"http://127.0.0.1:{proxy.metrics_port}")
        self.assertEqual(result.returncode, 0, f"nackguard status failed: {result.stderr}")
        return result.stdout

    def reload_with_sighup(self, proxy):
        """SIGHUP once the reloads a write may have started by itself are over; returns the
        (ok, error) counts from before the signal."""
        before = st.settle_reloads(proxy)
        proxy.signal(signal.SIGHUP)
        return before

    # ------------------------------------------------------------ 1. the JSON

    def test_1_json_of_a_poison_loop(self):
        nacks = 40
        s = self.start_scenario("json", max_redeliveries=1000, nacks=nacks)
        queue, proxy = s["queue"], s["proxy"]
        doc, entry = self.wait_returns(proxy, queue, nacks)

        self.assertEqual(set(entry), {"id", "queue", "returns", "deliveries", "first_return",
                                      "last_return", "crash_suspect", "next"},
                         f"keys of the top entry (no identity while hidden): {entry}")
        self.assertEqual(entry["id"], s["id"], "id: XXH3-128 of queue NUL message_id:<id>")
        self.assertEqual(entry["deliveries"], nacks, "deliveries that ended in a return")
        self.assertFalse(entry["crash_suspect"])
        self.assertRegex(entry["first_return"], ISO_MS)
        self.assertRegex(entry["last_return"], ISO_MS)
        self.assertLessEqual(entry["first_return"], entry["last_return"])
        self.assertEqual(entry["next"]["action"], "requeue", f"next: {entry['next']}")
        self.assertEqual(entry["next"]["when"], "next_return", f"next: {entry['next']}")

        row = st.queue_row(doc, queue)
        poison_deliveries, forwarded, republished = expected_counts(nacks)
        for part in ("window", "total"):
            counts = row[part]
            self.assertIsNotNone(counts, f"{part} of {row}")
            self.assertEqual(
                (counts["deliveries"], counts["returns"], counts["returns_became"],
                 counts["dead_letters"], counts["fallbacks"], counts["ack_timeouts"]),
                (GOODS + poison_deliveries, nacks,
                 {"forwarded": forwarded, "delayed": 0, "dead_lettered": 0,
                  "republished": republished},
                 {"max_redeliveries": 0, "crash_loop": 0, "broker_delivery_limit": 0,
                  "consumer_timeout": 0}, 0, 0), f"the queue's {part} counts")
        self.assertFalse(row["outage"])
        self.assertEqual(row["policy"], "q.yaml")
        # The queue was declared directly (not through the proxy), no management API is
        # configured and the policy has no broker_delivery_limit: the assumed limit, on either
        # queue type (a classic queue declared elsewhere is not known to be one).
        self.assertEqual(row["delivery_limit"], {"limit": 2, "from": "assumed"}, f"row: {row}")

        limits = doc["limits"]
        self.assertEqual(limits["tracker_entries"], 1, f"limits: {limits}")
        self.assertEqual(limits["client_connections"], 2,
                         "client_connections: the publisher and the consumer")
        self.assertEqual(limits["queues"], 1, f"limits: {limits}")
        self.assertEqual(limits["tracker_evictions"], 0, f"limits: {limits}")

        config = doc["config"]
        self.assertEqual(config["file"], proxy.config_path)
        self.assertEqual(config["policies_dir"], proxy.policies_dir)
        self.assertEqual(config["policies"], 1)
        self.assertIs(config["show_identities"], False)
        self.assertEqual(config["reloads"], {"ok": 0, "error": 0})
        self.assertIsNone(config["last_reload"])
        self.assertEqual(doc["nackguard"]["version"], ops.proxy_version())
        self.assertRegex(doc["nackguard"]["started_at"], ISO_MS)
        self.assertLessEqual(doc["nackguard"]["started_at"], doc["nackguard"]["now"])

        # Settled means settled: nothing moves while the consumer holds the poison.
        time.sleep(1.0)  # not a wait: an observation window after the awaited settled state
        again = st.status_json(proxy)
        self.assertEqual(st.top_entries(again, queue), [entry])
        self.assertEqual(st.queue_row(again, queue)["total"], row["total"])

    def test_1b_next_is_dead_letter_at_the_limit(self):
        s = self.start_scenario("limit", max_redeliveries=3, nacks=3)
        queue, proxy = s["queue"], s["proxy"]
        doc, entry = self.wait_returns(proxy, queue, 3)
        self.assertEqual(entry["id"], s["id"])
        self.assertEqual(entry["deliveries"], 3)
        _, forwarded, republished = expected_counts(3)
        total = st.queue_row(doc, queue)["total"]
        self.assertEqual((total["returns"], total["returns_became"]["forwarded"],
                          total["returns_became"]["republished"],
                          total["returns_became"]["dead_lettered"]),
                         (3, forwarded, republished, 0), f"total: {total}")
        predicted = entry["next"]
        # What the next return brings, for real: the poison's 4th return passes
        # max_redeliveries 3 and dead-letters it.
        s["consumer"].allow(4)
        dead_lettered = st.wait_status(
            proxy, lambda d: (st.queue_row(d, queue)["total"]["dead_letters"]
                              ["max_redeliveries"] == 1
                              and self.broker.message_count(f"{queue}.dlq") == 1), timeout=15)
        self.assertEqual(st.queue_row(dead_lettered, queue)["total"]["dead_letters"]
                         ["max_redeliveries"], 1, "the 4th return was not dead-lettered")
        self.assertEqual(self.broker.message_count(f"{queue}.dlq"), 1)
        self.assertEqual(s["consumer"].counts()[:3], (4, GOODS + 4, 4),
                         "(nacks, deliveries, poison deliveries): none after the dead-letter")
        self.assertEqual((predicted["action"], predicted["when"], predicted.get("reason")),
                         ("dead_letter", "next_return", "max_redeliveries"),
                         f"/status predicted {predicted} for the return that dead-lettered "
                         f"the poison")
        self.assertEqual(predicted.get("policy"), "q.yaml")

    # ------------------------------------------------------------ 2. privacy

    def test_2_identities_hidden_until_the_config_shows_them(self):
        if harness.RABBITMQCTL is None:
            self.skipTest("NACKGUARD_TEST_RABBITMQCTL is not set (a user with a unique "
                          "password needs rabbitmqctl)")
        secret = "S3cret-" + uuid.uuid4().hex
        user = "nackguard-status-" + uuid.uuid4().hex[:8]
        ops.add_user(user, secret)
        self.addCleanup(lambda: harness.rabbitmqctl("delete_user", user))
        credentials = pika.PlainCredentials(user, secret)
        s = self.start_scenario("privacy", max_redeliveries=1000, nacks=5,
                                config={"metrics": {"show_identities": "false"}},
                                credentials=credentials)
        queue, proxy, poison_id = s["queue"], s["proxy"], s["poison_id"]
        doc, entry = self.wait_returns(proxy, queue, 5)

        def assert_private(shown_id):
            texts = {"/status.json": proxy.get("/status.json")[2],
                     "/status": proxy.get("/status")[2],
                     "nackguard status": self.cli_text(proxy)}
            for where, text in texts.items():
                self.assertNotIn(s["marker"], text, f"a message body is in {where}")
                self.assertNotIn(secret, text, f"the password is in {where}")
                self.assertNotIn(user, text, f"the user name is in {where}")
                if not shown_id:
                    self.assertNotIn(poison_id, text, f"the message_id is in {where}")
            return texts

        texts = assert_private(shown_id=False)
        self.assertNotIn("identity", entry, f"top entry: {entry}")
        self.assertRegex(entry["id"], r"^[0-9a-f]{12}$")
        self.assertEqual(entry["id"], s["id"])
        self.assertIn(f"#{s['id']}", texts["nackguard status"])
        self.assertIs(doc["config"]["show_identities"], False)

        proxy.config["metrics"] = {"show_identities": "true"}
        proxy.write_config()
        ok, error = self.reload_with_sighup(proxy)
        self.assertEqual(error, 0, "a failed reload before the SIGHUP")
        doc = st.wait_status(proxy, lambda d: st.reload_counts(d) == (ok + 1, 0), timeout=10)
        self.assertEqual(st.reload_counts(doc), (ok + 1, 0), f"config: {doc['config']}")
        self.assertEqual(doc["config"]["last_reload"]["result"], "ok", doc["config"])
        self.assertIs(doc["config"]["show_identities"], True)

        # Identities are kept only while shown: the poison's next return brings its own.
        s["consumer"].allow(8)
        s["consumer"].wait_settled(acks=GOODS)
        doc, entry = self.wait_returns(proxy, queue, 8)
        self.assertEqual(entry.get("identity"), f"message_id:{poison_id}", f"entry: {entry}")
        self.assertEqual(entry["id"], s["id"], "the id does not change with the identity shown")
        texts = assert_private(shown_id=True)
        self.assertIn(f"message_id:{poison_id}", texts["nackguard status"])

    # ------------------------------------------------------------ 3. the command line

    def test_3_nackguard_status_command(self):
        nacks = 7
        s = self.start_scenario("cli", max_redeliveries=1000, nacks=nacks)
        queue, proxy = s["queue"], s["proxy"]
        self.wait_returns(proxy, queue, nacks)

        out = self.cli_text(proxy)  # a URL with no path: /status.json
        self.assertTrue(out.startswith(f"nackguard {ops.proxy_version()} on "), out)
        lines = out.splitlines()
        self.assertTrue(any(line.startswith("config: ") for line in lines), out)
        self.assertTrue(any(line.startswith("limits: ") for line in lines), out)
        queues_at = next(i for i, line in enumerate(lines) if line.startswith("QUEUES (last "))
        top_at = lines.index("TOP MESSAGES (by returns)")
        self.assertLess(queues_at, top_at, out)
        self.assertEqual(lines[queues_at + 1].split()[:3], ["QUEUE", "DELIVERIES", "RETURNS"])
        self.assertEqual(lines[top_at + 1].split(),
                         ["QUEUE", "MESSAGE", "RETURNS", "DELIVERIES", "FIRST", "RETURN",
                          "LAST", "RETURN", "NEXT"])
        queue_rows = [line.split() for line in lines[queues_at + 2:top_at]
                      if line.startswith(queue + " ")]
        poison_deliveries, _, _ = expected_counts(nacks)
        self.assertEqual([row[:3] for row in queue_rows],
                         [[queue, str(GOODS + poison_deliveries), str(nacks)]], out)
        top_rows = [line.split() for line in lines[top_at + 2:] if line.startswith(queue + " ")]
        self.assertEqual([row[:4] for row in top_rows],
                         [[queue, f"#{s['id']}", str(nacks), str(nacks)]], out)
        self.assertEqual(top_rows[0][-1], "requeue", out)

        with_path = self.run_cli("--url", f"http://127.0.0.1:{proxy.metrics_port}/status.json")
        self.assertEqual(with_path.returncode, 0, with_path.stderr)
        self.assertIn(f"#{s['id']}", with_path.stdout)

        closed = harness.free_port()
        refused = self.run_cli("--url", f"http://127.0.0.1:{closed}")
        self.assertEqual(refused.returncode, 1, refused.stdout + refused.stderr)
        self.assertIn(f"nackguard status: cannot connect to 127.0.0.1:{closed}: ",
                      refused.stderr)
        self.assertEqual(refused.stdout, "")

        bad = self.run_cli("--interval", "0")
        self.assertEqual(bad.returncode, 2, bad.stdout + bad.stderr)

        url = f"http://127.0.0.1:{proxy.metrics_port}"
        watch = subprocess.Popen([harness.PROXY_BIN, "status", "--url", url, "--watch",
                                  "--interval", "1"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            watch.communicate(timeout=3.5)
            self.fail(f"nackguard status --watch exited by itself ({watch.returncode})")
        except subprocess.TimeoutExpired:
            pass
        watch.kill()
        out, err = watch.communicate(timeout=10)
        self.assertGreaterEqual(out.count(CLEAR), 2, f"--watch output: {out!r}, stderr {err!r}")
        self.assertTrue(out.startswith(CLEAR + "nackguard "), out[:200])
        self.assertEqual(out.count(f"#{s['id']}"), out.count(CLEAR), "one TOP row per redraw")

    # ------------------------------------------------------------ 4. a failed reload

    def test_4_failed_reload_names_the_file(self):
        s = self.start_scenario("reload", max_redeliveries=3, nacks=2)
        queue, proxy = s["queue"], s["proxy"]
        self.wait_returns(proxy, queue, 2)
        path = proxy.policy_path("q.yaml")
        proxy.write_policy("q.yaml", f"queue: {queue}\nmax_redeliveries: [1,\n")
        ok, error = self.reload_with_sighup(proxy)
        self.assertEqual(ok, 0, "a successful reload of a corrupt policy")
        doc = st.wait_status(proxy, lambda d: st.reload_counts(d) == (0, error + 1), timeout=10)
        config = doc["config"]
        self.assertEqual(st.reload_counts(doc), (0, error + 1), f"config: {config}")
        self.assertIsNotNone(config["last_reload"], f"config: {config}")
        self.assertEqual(config["last_reload"]["result"], "error", f"config: {config}")
        self.assertIn(path, config["last_reload"]["message"], f"config: {config}")
        self.assertRegex(config["last_reload"]["at"], ISO_MS)
        self.assertEqual(config["policies"], 1)
        # The policy loaded at start (max_redeliveries 3) stays in force: the 3rd return is
        # still requeued.
        _, entry = self.wait_returns(proxy, queue, 2)
        self.assertEqual((entry["next"]["action"], entry["next"]["when"]),
                         ("requeue", "next_return"), f"next: {entry['next']}")
        self.assertIn("last reload: ", self.cli_text(proxy))
        self.assertIn(" error", [line for line in self.cli_text(proxy).splitlines()
                                 if line.startswith("config: ")][0])


if __name__ == "__main__":
    import unittest
    unittest.main()
