"""Hostile input against nackguard, with a pika bystander stream that must not notice.

Covers what tests/integration/test_malformed.py does not (that file already checks a wrong
protocol header, a bad end octet on a method frame, an oversize frame just past frame_max,
an unknown frame type, a content body or header with no publish, garbage, a truncated frame
then a half-close, and scripted brokers sending garbage or a bad frame):

- frames far larger than frame_max: a 4 GiB length after the handshake, a 100 MB length
  before it (in connection.start-ok): closed at once, and no memory taken for them;
- a bad end octet on a content body frame in the middle of a message;
- a truncated frame followed by silence, on a connection with heartbeat 2: closed after two
  heartbeat intervals;
- unknown methods (class 999 on a channel and on channel 0, method 999 of class basic);
- basic.publish directly followed by a body frame (no content header);
- field tables nested 10,000 deep: in a basic.publish's headers (published directly to the
  broker, then delivered through the proxy, consumed and nacked until dead-lettered), and in
  queue.declare and basic.consume arguments;
- handshakes that never complete (silent TCP, stops after the protocol header, after
  start-ok, after tune-ok): closed after timeouts.handshake (2 s) in under 4 s;
- 5,000 channel.open on one connection, pipelined: within channel_max (channels 1..1000
  opened and closed, 5 rounds) every one opens and closes; on channels 1..5000 the connection
  is refused with a connection.close at the first channel past channel_max; channel.open on
  the channel the proxy keeps for itself is refused too; the proxy stays responsive (a new
  pika connection works meanwhile) and its RSS stays bounded;
- a policy file corrupted (garbage, half-written, alternating with valid text) during
  SIGHUP reloads: the previous policies stay in force, the proxy keeps working, and a
  valid file is taken at the next reload.

Each case must end in a clean close (connection.close then EOF, or EOF) within 5 s, the
proxy alive, and the bystander (a pika publisher with confirms and a consumer through the
same proxy) without a single connection error and with an exact account (lost = 0).
The broker's own answer to each frame case (sent directly to the private node) is recorded
next to the proxy's.

What each case sends is in hostile_cases.py, the shared proxy, its bystander and the outcome
of a raw connection in hostile_support.py, the policy file rewrites in hostile_reload.py.
"""

import collections
import threading
import time
import unittest

import faults_support as fs
from faults_support import setUpModule, tearDownModule  # noqa: F401  (the module fixture)
import hostile_cases as hc
import hostile_reload as hr
import rawamqp as raw
from hostile_support import HostileCase, run_all, short



class HostileInputTest(HostileCase):

    # ------------------------------------------------------------ oversize frames
    def test_huge_frame_lengths(self):
        runs = self.each_both(hc.huge_frame_cases(self.by_queue))
        results = self.assert_each_clean(runs)
        peak = self.sampler.max_rss_kb()
        self.record(fault="frames far larger than frame_max", cases=results)
        self.assertLess(peak - self.rss_before, 16 * 1024,
                        f"RSS grew from {self.rss_before} to {peak} KiB")
        self.finish()

    # ------------------------------------------------------------ frame-level oddities
    def test_bad_frames_mid_message_and_unknown_methods(self):
        results = {}
        # One case at a time (its broker-direct run alongside): all twelve connections at once
        # made this test take 33 s instead of 10.
        for name, (case, codes) in hc.bad_frame_cases(self.by_queue).items():
            r = self.both(case)
            results[name] = {k: short(v) for k, v in r.items()}
            with self.subTest(case=name):
                self.assert_clean(r["proxy"], name, codes)
                if codes is None:
                    self.assertIsNotNone(r["proxy"]["close"],
                                         f"{name}: no connection.close: {r['proxy']}")
        self.record(fault="bad frames mid-message, publish without header, unknown methods, "
                          "the reserved channel", cases=results)
        self.finish()

    def test_truncated_frame_then_silence_with_heartbeat(self):
        r = self.both(hc.truncated_frame_then_silence)
        self.record(fault="truncated frame, then silence (heartbeat 2)",
                    cases={k: short(v) for k, v in r.items()},
                    proxy_log=self.proxy.log_lines("sent nothing for")[-1:])
        self.assert_clean(r["proxy"], "truncated frame then silence", None)
        self.assertLess(r["proxy"]["seconds"], 2 * 2 + 2.0, r["proxy"])
        self.finish()

    # ------------------------------------------------------------ deep field tables
    def test_field_tables_nested_10000_deep(self):
        deep = raw.nested_table(10000)
        self.assertLess(len(deep), 100000)
        # (a) in method arguments, through the proxy and directly
        runs = self.each_both(hc.deep_argument_cases(deep, self.by_queue))
        results = self.assert_each_clean(runs, proxy_alive=True)

        # (b) in a publish's headers through the proxy: refused or accepted, never a crash
        ledger = fs.Ledger("deep")
        queue = self.queue("deep")
        results["publish headers, through the proxy"] = hc.publish_deep(
            self.proxy.port, queue, deep, ledger, "deep-000001")
        self.assertTrue(self.proxy.alive(), "publishing a deep table killed the proxy")

        # (c) the broker accepts it directly; then it is delivered through the proxy to a
        # consumer that nacks it until the policy (3) dead-letters it, or the proxy gives up
        direct = hc.publish_deep(fs.BROKER_PORT, queue, deep, ledger, "deep-000002",
                                 close=True)
        self.assertTrue(direct.get("confirmed"),
                        "the broker did not confirm the deep-headers message")
        deliveries, closes = hc.nack_everything(self.proxy.port, queue)
        fs.wait_none_unacked(self.node, queue)  # the last nack and the close have taken effect
        dlq, delayed, queued = fs.final_count(self.node, queue)
        account = ledger.account(dlq, delayed, queued)
        results["deep headers delivered through the proxy and nacked"] = {
            "deliveries": dict(collections.Counter(i for i, _ in deliveries)),
            "consumer_closed": closes[:3],
            "account": fs.Ledger.summary(account)}
        self.record(fault="field tables nested 10,000 deep", cases=results, deep_account=account,
                    proxy_log=[l.split(" ", 2)[-1][:200] for l in self.proxy.full_log().splitlines()
                               if "deep" in l or "too deep" in l or "fallback" in l][-4:])
        self.assert_no_loss(account, "deep-headers message")
        self.assertEqual(closes, [], "a consumer of the deep-headers message was disconnected")
        self.assertTrue(self.proxy.alive())
        per_message = collections.Counter(i for i, _ in deliveries)
        self.finish()
        # The guard's promise holds for it too: returned more than max_redeliveries (3)
        # times, it is dead-lettered (or at least delayed), not redelivered without end.
        self.assertLessEqual(max(per_message.values(), default=0), 3 + 1,
                             f"a message with a 10,000-deep headers table was redelivered "
                             f"{dict(per_message)} times with max_redeliveries 3")
        # ...and the proxy dead-letters it itself: a copy in the DLQ, the original acked.
        for msg_id in sorted(ledger.confirmed):
            self.assertEqual(dlq[msg_id], 1, f"{msg_id} is not in the DLQ once: "
                                             f"{fs.Ledger.summary(account)}")
            self.assertEqual(per_message[msg_id], 3 + 1, dict(per_message))

    # ------------------------------------------------------------ handshake timeouts
    def test_handshake_never_completes(self):
        cases = hc.unfinished_handshake_cases()
        runs = run_all({name: (case, self.proxy.port) for name, case in cases.items()})
        results = {}
        for name in cases:  # all at once: each is closed after timeouts.handshake all the same
            o = runs[name]
            results[name] = short(o)
            with self.subTest(case=name):
                self.assertTrue(o["eof"], f"{name}: still open after 8 s: {o}")
                self.assertLess(o["seconds"], 4.0, f"{name}: closed after {o['seconds']}s")
        self.record(fault="handshake never completes (timeouts.handshake 2s)", cases=results,
                    proxy_log=self.proxy.log_lines("did not complete within")[-1:])
        self.finish()

    # ------------------------------------------------------------ channel.open flood
    def test_channel_open_flood(self):
        within = self.both(hc.open_close_cycles, concurrent=False)  # timed: one at a time
        direct = hc.channel_open_flood(fs.BROKER_PORT)
        # through the proxy, while a fresh pika connection is timed
        result = {}
        sent = threading.Event()
        t = threading.Thread(target=lambda: result.update(
            hc.channel_open_flood(self.proxy.port, sent=sent)))
        t.start()
        sent.wait(5)  # the whole flood is on its way to the proxy
        t0 = time.monotonic()
        conn = fs.connect(self.proxy.port)
        ch = conn.channel()
        ch.queue_declare(self.by_queue, passive=True)
        fs.close_quietly(conn)
        responsive_s = time.monotonic() - t0
        t.join(40)
        peak = self.sampler.max_rss_kb()
        self.record(fault="5,000 channel.open pipelined on one connection",
                    direct=direct, proxy=result, pika_connect_during_flood_s=round(responsive_s, 2),
                    rss_kb_peak_during=peak, within_channel_max=within)
        self.assertEqual((within["proxy"]["opened"], within["proxy"]["closed"]), (5000, 5000),
                         f"open/close cycles within channel_max: {within}")
        self.assertFalse(t.is_alive(), "the flood connection hung")
        self.assertIsNotNone(result.get("close"), f"no connection.close: {result}")
        self.assertLessEqual(result["opened"], result["channel_max"], result)
        self.assertLess(responsive_s, 5.0, "a new connection took too long during the flood")
        self.assertLess(peak - self.rss_before, 32 * 1024, f"RSS {self.rss_before} -> {peak}")
        self.finish()

    # ------------------------------------------------------------ policy reloads
    def test_policy_file_corrupted_during_reload(self):
        queue = self.queue("reload")
        proxy = fs.FaultProxy("reload", handshake="2s", policies={
            hr.POLICY_FILE: fs.policy_yaml(queue, 1, rate=fs.NO_RATE_LIMITS)}).start()
        self.proxies.append(proxy)
        self.addCleanup(proxy.cleanup)
        ledger = fs.Ledger("reload")
        # every message is poison: its dead-letter line tells the policy in force
        decide = fs.standard_decide(poison_every=1, flaky_every=0)
        pub, con = self.start_traffic(proxy, queue, ledger, "rl", 20, prefetch=5, decide=decide)
        reloads = hr.PolicyReloads(proxy, queue)
        self.assertTrue(reloads.wait_dead_letter(0), proxy.log_text())
        self.assertEqual(reloads.returns_in_force(0), [2],
                         "max_redeliveries 1 = dead-lettered at 2")
        corrupt = hr.corrupt_policies(queue)
        failed_lines = []
        for name, text in corrupt.items():
            self.assertTrue(reloads.reload_refused(text), f"{name}: no 'reload failed' line")
            failed_lines.append(name)
        mark = reloads.mark()
        # every message is a poison: dead-letters go on, and say which policy is in force
        self.assertTrue(reloads.wait_dead_letter(mark), "no dead-letter after the corrupt files")
        old_kept = reloads.returns_in_force(mark)
        # a storm: writes racing SIGHUPs, valid and corrupt text alternating
        valid2 = fs.policy_yaml(queue, 2, rate=fs.NO_RATE_LIMITS)
        reloads.storm([corrupt["half-written"], valid2])
        self.assertTrue(proxy.alive(), "the proxy died during the reload storm")
        # finally a valid file and one more reload: the new policy is in force
        self.assertTrue(reloads.reload_valid(valid2))
        mark = reloads.mark()
        self.assertTrue(reloads.wait_dead_letter(mark))
        new_in_force = reloads.returns_in_force(mark)
        pub.stop()
        fs.wait_drained(ledger, queue, 30, dlq_expected=len(ledger.confirmed))
        con.stop()
        account = ledger.account(*fs.final_count(self.node, queue))
        metrics = proxy.metrics()
        reload_metrics = {k: v for k, v in metrics.items()
                          if k.startswith("nackguard_policy_reloads")}
        self.record(fault="policy file corrupted during SIGHUP reloads", account=account,
                    corrupt_reloads_refused=failed_lines, returns_while_corrupt=old_kept,
                    returns_after_valid_reload=new_in_force, reload_metrics=reload_metrics,
                    client_errors=[d for _, k, d in pub.events.events + con.events.events
                                   if k == "error"][:3])
        self.assert_no_loss(account, "reload stream")
        self.assertEqual(old_kept, [2], "the corrupt file changed the policy in force")
        self.assertEqual(new_in_force, [3], "the valid file did not take effect")
        self.assertEqual(pub.connects + con.connects, 2, "a client was disconnected")
        self.finish()


if __name__ == "__main__":
    unittest.main()
