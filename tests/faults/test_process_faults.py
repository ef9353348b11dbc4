"""Process faults and resource bounds around nackguard, each ending in an exact account.

All against this module's PRIVATE RabbitMQ node (started in setUpModule, stopped in
tearDownModule); the shared test broker is never used.

- A consumer (a child process) killed with kill -9, twice, while it holds a full prefetch of
  unacked deliveries and while messages it nacked wait in delay queues (policy requeue:
  delayed): every confirmed message is consumed or dead-lettered.
- The proxy killed with kill -9 in the middle of a burst of delayed republishes and
  dead-letters, then restarted on the same port: clients reconnect and finish; a copy may be
  duplicated (its confirm came, the original's ack did not), nothing is lost.
- A slow consumer behind a fast broker (prefetch 0 = unlimited, 20,000 x 4 KiB queued): with
  a consumer that stops reading, the proxy's RSS stays under 100 MB (back-pressure); with a
  pika consumer that reads everything but acks slowly, the bodies it keeps stay within
  limits.retained_body_bytes (32 MiB here), RSS within that plus a stated slack, and every
  message still reaches the consumer.
- 1,000 client connections at once (raw asyncio AMQP clients: handshake, 3 channels, one
  confirmed publish, close): the proxy's fd count returns exactly to its baseline within 5 s
  and its RSS to within 20 MB of it within 3 s more.

The consumer children, the slow raw consumer and the metric watcher are in
process_fault_support.py, the many connections in connection_burst.py.
"""

import os
import signal
import time
import unittest

import connection_burst
import faults_support as fs
from faults_support import setUpModule, tearDownModule  # noqa: F401  (the module fixture)
import process_fault_support as ps



class ProcessFaultTest(fs.FaultTest):

    def bystander(self, proxy, tag, rate=50):
        """A steady publisher and consumer on their own queue through `proxy` (whose
        policies must cover the queue: policies={"by.yaml": ...} with queue "faults.*")."""
        stream = fs.Bystander(proxy.port, self.queue(tag), fs.Ledger(tag), tag, rate=rate)
        self.addCleanup(stream.stop, 5)
        return stream.start()

    def finish_bystander(self, stream):
        stream.drain(30)
        account = stream.ledger.account(*fs.final_count(self.node, stream.queue))
        self.assert_no_loss(account, "bystander")
        return account

    def account(self, ledger, queue, what, extra_queues=(), poison_every=25):
        return self.assert_exact_account(self.node, ledger, queue, what, extra_queues, poison_every)

    # ------------------------------------------------------------ (2) consumer kill -9
    def test_consumer_killed_holding_unacked_and_delayed(self):
        queue = self.queue("conskill")
        policy = fs.delayed_policy_yaml(queue, 3, "1s", 2, "2s")
        proxy = self.start_proxy(policies={"q.yaml": policy})
        ledger = fs.Ledger("conskill")
        pub = fs.Publisher(proxy.port, queue, ledger, "ck", rate=80)
        self.addCleanup(pub.stop, 5)
        pub.start()
        children = ps.ConsumerChildren(proxy.port, queue, proxy.dir, self.addCleanup)
        delay_queue = f"nackguard.delay.{queue}.1000ms"
        self.queues_to_delete += [delay_queue, f"nackguard.delay.{queue}.2000ms"]
        kills = []
        for round_ in range(2):
            child = children.spawn()
            # Deliberate: the consumer works 4.5 s before each kill, long enough for its nacks
            # to pass through the 1 s and 2 s delay queues, so that the kill falls among
            # delayed republishes at both backoff steps (the unacked deliveries it holds are
            # awaited at the kill itself).
            time.sleep(4.5)
            if child.poll() is not None:
                self.fail(f"consumer {round_} exited by itself: {children.stderr_tail()}")
            kills.append(children.kill_holding_unacked(child, self.node, delay_queue))
            fs.log(f"consumer kill {round_}: {kills[-1]}")
        time.sleep(1)  # deliberate: 1 s more of publishing with no consumer at all
        pub.stop()
        final = children.spawn()
        poison = sum(1 for i in ledger.confirmed if fs.number_of(i) % 25 == 0)
        # The drain is paced: each delivery a killed consumer held is a crash suspect, handed
        # out alone at its next delivery, and what follows it waits for its ack, which this
        # consumer holds up to 1 s. So up to a second per suspect, beside the delays (a
        # quiet machine drains in about 30 s; CI once needed more than 60).
        suspects = sum(k["unacked_at_kill"] for k in kills)
        started = time.monotonic()
        drained = fs.wait_until(lambda: children.settled(ledger, poison), 60 + 2 * suspects,
                                0.5)
        fs.log(f"drained: {drained} after {time.monotonic() - started:.1f}s")
        fs.wait_none_unacked(self.node, queue)  # the last consumer's acks have reached the broker
        final.send_signal(signal.SIGTERM)
        final.wait(10)
        fs.wait_none_unacked(self.node, queue)  # what it still held is back in the queue
        children.read_events(ledger)
        metrics = proxy.metrics()
        account = self.account(ledger, queue, "consumer kill -9")
        self.record(fault="consumer kill -9 (x2) holding unacked deliveries and delayed "
                          "republishes (requeue: delayed)",
                    kills=kills, drained=drained, **ps.copy_counters(proxy, metrics))
        self.assertTrue(any(k["unacked_at_kill"] for k in kills),
                        f"the consumer held no unacked deliveries when killed: {kills}")
        self.assertTrue(any(k["in_delay_queue_at_kill"] for k in kills),
                        f"no delayed republish was waiting when the consumer was killed: {kills}")
        self.assertTrue(drained, f"the queue did not drain: {fs.Ledger.summary(account)}")
        # Killing a consumer is the consumer's doing: every copy nackguard makes meanwhile
        # (delayed republishes, dead-letters) must still go through. A fallback here once came
        # in storms of thousands (the DLQ check closing the channel under copies in flight,
        # and an inequivalent delay queue; docs/reliability.md, "consumer-kill fallback storm").
        fallbacks = proxy.metric_sum("nackguard_fallbacks_total")
        self.assertEqual(fallbacks, 0,
                         f"fallbacks after a consumer kill: "
                         f"{proxy.log_lines('fallback')[:3]}")

    # ------------------------------------------------------------ (3) proxy kill -9
    def test_proxy_killed_during_republish_burst(self):
        queue = self.queue("proxykill")
        policy = fs.delayed_policy_yaml(queue, 2, "300ms", 1, "300ms")
        self.queues_to_delete.append(f"nackguard.delay.{queue}.300ms")
        proxy = self.start_proxy(policies={"q.yaml": policy})
        ledger = fs.Ledger("proxykill")
        decide = fs.standard_decide(poison_every=3, flaky_every=5)
        # A backlog with one poison message in three: the consumer's first pass is a burst
        # of nacks, which the proxy turns into delayed republishes and, at the third return,
        # dead-letters.
        fs.preload(queue, 1000, ledger, "pk")
        pub, con = self.start_traffic(proxy, queue, ledger, "pkl", 80, prefetch=50,
                                      decide=decide)
        burst = fs.wait_until(lambda: (fs.message_count(f"{queue}.dlq") or 0) >= 40, 40, 0.05)
        before = proxy.metrics()
        t_kill = time.monotonic()
        proxy.kill9()
        dlq_at_kill = fs.message_count(f"{queue}.dlq")
        self.assertTrue(burst, "no dead-letter burst before the kill")
        pub_err = fs.wait_until(lambda: pub.events.since(t_kill, "error"), 10, 0.05)
        con_err = fs.wait_until(lambda: con.events.since(t_kill, "error"), 10, 0.05)
        time.sleep(1.5)  # deliberate: the proxy stays down 1.5 s while the clients retry
        t_restart = time.monotonic()
        proxy.restart()
        restart_s = time.monotonic() - t_restart
        self.assertTrue(fs.wait_until(lambda: pub.events.since(t_restart, "connected"), 30),
                        "the publisher did not reconnect to the restarted proxy")
        self.assertTrue(fs.wait_until(lambda: con.events.since(t_restart, "connected"), 30),
                        "the consumer did not reconnect to the restarted proxy")
        confirmed_at_restart = len(ledger.confirmed)
        self.assertTrue(fs.wait_until(lambda: len(ledger.confirmed) >= confirmed_at_restart + 80,
                                      15, 0.05), "publishing did not resume after the restart")
        self.assertTrue(pub.stop(), "the publisher thread is stuck")
        poison = sum(1 for i in ledger.confirmed if fs.number_of(i) % 3 == 0)
        drained = fs.wait_drained(ledger, queue, 60, dlq_expected=poison)
        self.assertTrue(con.stop(), "the consumer thread is stuck")
        fs.wait_none_unacked(self.node, queue)  # the consumer's close has reached the broker
        account = self.account(ledger, queue, "proxy kill -9", poison_every=3)
        errors = sorted({d for _, _, d in pub.events.since(t_kill, "error")
                         + con.events.since(t_kill, "error")})
        self.record(fault="proxy kill -9 during a republish/dead-letter burst, restart",
                    dlq_at_kill=dlq_at_kill, drained=drained, restart_s=round(restart_s, 2),
                    metrics_before_kill=ps.dead_letter_counters(before),
                    client_errors=errors[:6])
        self.assertTrue(pub_err and con_err, "a client did not notice the proxy's death")
        self.assertTrue(drained, f"not drained: {fs.Ledger.summary(account)}")

    # ------------------------------------------------------------ proxy stall
    def test_proxy_stalled_client_heartbeat_closes(self):
        """The proxy itself stalls (SIGSTOP 10 s): only the clients' own heartbeat logic can
        notice, through the proxy. pika 1.2 checks every heartbeat + 5 s and needs one whole
        silent interval, so with heartbeat=2 it closes (AMQPHeartbeatTimeout) 7 to 14 s into
        the stall; then it reconnects once the proxy runs again, and nothing is lost."""
        hb = 2
        queue = self.queue("proxystall")
        proxy = self.start_proxy(policies={"q.yaml": fs.policy_yaml(queue, 3,
                                                                     rate=fs.NO_RATE_LIMITS)})
        ledger = fs.Ledger("proxystall")
        pub, con = self.start_traffic(proxy, queue, ledger, "pst", 100, heartbeat=hb)
        fs.wait_flowing(ledger, 100)  # both clients connected, the stream flowing
        self.addCleanup(lambda: proxy.alive() and os.kill(proxy.pid, signal.SIGCONT))
        t_stop = time.monotonic()
        os.kill(proxy.pid, signal.SIGSTOP)
        try:
            got_pub = fs.wait_until(lambda: pub.events.since(t_stop, "error"), 15, 0.05)
            got_con = fs.wait_until(lambda: con.events.since(t_stop, "error"), 15, 0.05)
            remaining = 10 - (time.monotonic() - t_stop)
            if remaining > 0:
                time.sleep(remaining)  # deliberate: the stall lasts 10 s
        finally:
            os.kill(proxy.pid, signal.SIGCONT)
        t_cont = time.monotonic()
        self.assertTrue(got_pub and got_con, "a client never noticed the stalled proxy")
        pub_err = pub.events.since(t_stop, "error")[0]
        con_err = con.events.since(t_stop, "error")[0]
        back = fs.wait_until(lambda: pub.events.since(t_cont, "connected")
                             and con.events.since(t_cont, "connected"), 40, 0.1)
        self.assertTrue(back, "the clients did not reconnect after SIGCONT")
        fs.wait_flowing(ledger)  # the stream flows again
        self.assertTrue(pub.stop(), "the publisher thread is stuck")
        poison = sum(1 for i in ledger.confirmed if fs.number_of(i) % 25 == 0)
        drained = fs.wait_drained(ledger, queue, 45, dlq_expected=poison)
        self.assertTrue(con.stop(), "the consumer thread is stuck")
        self.account(ledger, queue, "proxy stall (SIGSTOP)")
        closes = {"publisher": round(pub_err[0] - t_stop, 2),
                  "consumer": round(con_err[0] - t_stop, 2)}
        self.record(fault="proxy stalled (SIGSTOP 10 s, SIGCONT), clients with heartbeat 2",
                    heartbeat=hb, close_after_s=closes, errors=[pub_err[2], con_err[2]],
                    drained=drained)
        check = hb + 5  # pika 1.2: HeartbeatChecker._check_interval
        self.assertLess(max(closes.values()), 2 * check + 1.5,
                        f"pika noticed the stalled proxy only after {closes}")
        for error in (pub_err[2], con_err[2]):
            self.assertTrue(error.startswith(("AMQPHeartbeatTimeout", "StreamLostError")), error)

    # ------------------------------------------------------------ slow consumers
    def slow_setup(self, tag, extra_config="", keep_bodies=False):
        """keep_bodies: the queue's own policy says `requeue: delayed`, under which every
        delivery keeps its body (a first return needs a copy); under `immediate` a first
        delivery keeps none (docs/choosing-a-policy.md, "Which bodies nackguard keeps")."""
        queue = self.queue(tag)
        policies = {"q.yaml": fs.policy_yaml("faults.*", 3, rate=fs.NO_RATE_LIMITS)}
        if keep_bodies:
            policies["slow.yaml"] = fs.policy_yaml(queue, 3, requeue="delayed",
                                                   rate=fs.NO_RATE_LIMITS)
        proxy = self.start_proxy(policies=policies, extra_config=extra_config)
        ledger = fs.Ledger(tag)
        t0 = time.monotonic()
        fs.preload(queue, 20000, ledger, tag, size=4096, persistent=False, window=1000)
        self.record(preload_s=round(time.monotonic() - t0, 1))
        self.assertEqual(len(ledger.confirmed), 20000)
        bystander = self.bystander(proxy, f"{tag}by")
        sampler = fs.Sampler(proxy.pid, 0.1)
        sampler.start()
        self.addCleanup(sampler.stop)
        return queue, proxy, ledger, bystander, sampler

    def test_slow_consumer_not_reading_rss_bounded(self):
        """prefetch 0, 20,000 x 4 KiB queued, a consumer that stops reading its socket for
        4 s, then reads slowly (acking what it took), then drains: TCP back-pressure."""
        queue, proxy, ledger, bystander, sampler = self.slow_setup("slowread")
        baseline = proxy.rss_kb()
        consumer = ps.SlowRawConsumer(proxy.port, queue, ledger)
        self.addCleanup(consumer.abort)
        consumer.start()
        # Deliberate: 4 s of not reading at all; the broker could send all 80 MB meanwhile.
        time.sleep(4)
        peak_stalled = sampler.max_rss_kb()
        retained_stalled = proxy.metric_sum("nackguard_retained_body_bytes")
        consumer.read_slowly(3)
        slow_taken = len(consumer.taken)
        consumer.read_all(20000, 60)
        consumer.close()
        sampler.stop()
        peak = sampler.max_rss_kb()
        by_account = self.finish_bystander(bystander)
        account = self.account(ledger, queue, "slow consumer (not reading)")
        self.record(fault="slow consumer, prefetch 0, 20k x 4 KiB queued: stops reading 4 s, "
                          "then reads slowly, then drains (acking as it goes)",
                    rss_kb_baseline=baseline, rss_kb_peak_not_reading=peak_stalled,
                    retained_bytes_not_reading=retained_stalled, taken_while_slow=slow_taken,
                    rss_kb_peak=peak, bystander=by_account)
        self.assertEqual(len(consumer.taken), 20000, fs.Ledger.summary(account))
        self.assertLess(peak, 100 * 1024, f"RSS peaked at {peak} KiB")

    RETAINED_LIMIT = 32 << 20
    # A quorum queue does not send a prefetch-0 consumer everything: 4.3.6 kept about 2,300
    # deliveries (9 MB of bodies) in flight here. A budget below that is still reached.
    RETAINED_LIMIT_QUORUM = 4 << 20
    # Besides retained bodies: the relays' buffers (limits.buffer_bytes, 1 MiB per side and
    # connection), what the proxy knows of each of the 20,000 unacked deliveries, and the
    # allocator's slack. Measured with no body retained at all (limit 4 KiB): +20 MB.
    RSS_SLACK = 28 << 20

    def test_slow_consumer_all_unacked_in_flight_rss_bounded(self):
        """prefetch 0, 20,000 x 4 KiB queued, a pika consumer sleeping 0.5 ms per message:
        pika reads everything it is sent, so all 20,000 deliveries are unacked at once (on a
        classic queue). The proxy keeps unacked bodies (for a republish or dead-letter) only
        up to limits.retained_body_bytes, here 32 MiB (4 MiB on quorum queues); the others
        pass without being kept. The queue's policy delays returns, so that every delivery
        asks to keep its body."""
        limit = self.RETAINED_LIMIT if fs.QUEUE_TYPE == "classic" else self.RETAINED_LIMIT_QUORUM
        queue, proxy, ledger, bystander, sampler = self.slow_setup(
            "slowpika", extra_config=f"limits: {{retained_body_bytes: {limit}}}\n",
            keep_bodies=True)
        baseline = proxy.rss_kb()
        watcher = ps.MetricWatcher(proxy, "nackguard_retained_body_bytes")
        watcher.start()
        self.addCleanup(watcher.stop)
        slow = fs.Consumer(proxy.port, queue, ledger, prefetch=0, work=0.0005,
                           decide=lambda i, r, h: "ack", name="pika-slow")
        self.addCleanup(slow.stop, 5)
        slow.start()
        ok = fs.wait_until(lambda: len(ledger.consumed) >= 20000, 120, 0.5)
        slow.stop()
        sampler.stop()
        retained = watcher.stop().values
        peak = sampler.max_rss_kb()
        by_account = self.finish_bystander(bystander)
        account = self.account(ledger, queue, "slow consumer (pika, all unacked)")
        limit_metric = proxy.metric_sum("nackguard_retained_body_bytes_limit")
        retained_peak = max(retained, default=0)
        self.record(fault="slow consumer, prefetch 0, 20k x 4 KiB queued: pika consumer "
                          "sleeping 0.5 ms a message (every delivery unacked in flight), "
                          f"limits.retained_body_bytes {limit >> 20} MiB",
                    rss_kb_baseline=baseline, rss_kb_peak=peak, bystander=by_account,
                    retained_body_bytes_limit=limit_metric,
                    retained_body_bytes_peak=retained_peak,
                    retained_body_bytes_after=retained[-1] if retained else None)
        self.assertTrue(ok, f"pika did not consume everything: {fs.Ledger.summary(account)}")
        self.assertEqual(account["consumed"], 20000, fs.Ledger.summary(account))
        self.assertEqual(account["duplicated"], 0, fs.Ledger.summary(account))
        self.assertEqual(limit_metric, limit)
        # The budget held, and it filled: the 80 MB of bodies did not all fit, so most of them
        # passed without being kept, and still reached the consumer (20,000 of 20,000 above).
        # Past the limit only the runs of tags of the deliveries forwarded untracked are
        # charged (72 bytes each, at most 1024 a channel; docs/operations.md,
        # nackguard_untracked_deliveries_total): two channels here, this consumer's and the
        # bystander's.
        self.assertLessEqual(retained_peak, limit + 2 * 1024 * 72)
        self.assertGreater(retained_peak, 0.9 * limit, f"retained at most {retained_peak} bytes")
        bound_kb = baseline + (limit + self.RSS_SLACK) // 1024
        self.assertLessEqual(peak, bound_kb,
                             f"RSS peaked at {peak} KiB: more than the baseline {baseline} KiB "
                             f"+ the {limit >> 20} MiB budget + {self.RSS_SLACK >> 20} MiB")

    # ------------------------------------------------------------ (8) many connections
    def check_connection_stats(self, stats, ledger, account):
        n = stats["connections"]
        self.assertEqual(stats["failures"], 0, f"{stats['failures']} of {n} connections "
                                               f"failed: {stats['failure_examples']}")
        self.assertEqual(stats["open_at_once"], n, "not every connection was open at once")
        self.assert_no_loss(account, f"{n} connections")
        self.assertEqual(account["confirmed"], n)
        self.assertTrue(stats["fd_back"], f"proxy fds {stats['fd_after']} not back to the "
                                          f"baseline {stats['fd_baseline']} within 5 s")
        self.assertLess(stats["rss_kb_after"] - stats["rss_kb_baseline"], 20 * 1024,
                        f"RSS {stats['rss_kb_baseline']} -> {stats['rss_kb_after']} KiB "
                        "after the connections closed")
        self.assertGreaterEqual(stats["fd_peak"], stats["fd_baseline"] + 2 * n,
                                "the proxy never held a client and an upstream socket for "
                                "every connection at once")

    def test_thousand_concurrent_connections(self):
        """1,000 at once, to a scripted upstream (the private node cannot take 1,000)."""
        upstream = fs.ScriptedBroker().start()
        self.addCleanup(upstream.stop)
        proxy = self.start_proxy(name="conns1000", upstream_port=upstream.port)
        ledger, stats = connection_burst.open_many(proxy, 1000, "scripted", "cs")
        account = ledger.account(queued=upstream.received)
        stats["upstream_peak_open"] = upstream.peak_open
        stats["upstream_errors"] = upstream.errors[:3]
        self.record(fault="1,000 concurrent client connections (3 channels, 1 confirmed "
                          "publish, close) through the proxy to a scripted AMQP upstream",
                    account=account, **stats)
        self.assertEqual(upstream.errors, [])
        self.check_connection_stats(stats, ledger, account)

    def test_many_concurrent_connections_real_broker(self):
        """300 at once to the real node (its VM has 1024 fds, shared with its queue files),
        with a steady stream through the same proxy."""
        queue = self.queue("conns")
        proxy = self.start_proxy(name="conns300", policies={
            "all.yaml": fs.policy_yaml("faults.*", 3, rate=fs.NO_RATE_LIMITS)})
        bystander = self.bystander(proxy, "connsby", rate=30)
        fs.wait_flowing(bystander.ledger, 60)  # the steady stream is flowing
        ledger, stats = connection_burst.open_many(proxy, 300, queue, "cn", gate_size=50)
        by_account = self.finish_bystander(bystander)
        account = ledger.account(queued=fs.drain_ids(queue))
        self.record(fault="300 concurrent client connections (3 channels, 1 confirmed "
                          "publish, close) through the proxy to the private node",
                    account=account, bystander=by_account, **stats)
        self.check_connection_stats(stats, ledger, account)


if __name__ == "__main__":
    unittest.main()
