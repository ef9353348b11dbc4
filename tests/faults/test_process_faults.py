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
"""

import asyncio
import collections
import os
import resource
import signal
import struct
import subprocess
import sys
import threading
import time
import unittest

import faults_support as fs
import rawamqp

NODE = None


def setUpModule():
    global NODE
    NODE = fs.start_module_node()


def tearDownModule():
    fs.stop_module_node()


class ProcessFaultTest(fs.FaultTest):

    def bystander(self, proxy, tag, rate=50):
        """A steady publisher and consumer on their own queue through `proxy` (whose
        policies must cover the queue: policies={"by.yaml": ...} with queue "faults.*")."""
        queue = self.queue(tag)
        ledger = fs.Ledger(tag)
        pub = fs.Publisher(proxy.port, queue, ledger, tag, rate=rate)
        con = fs.Consumer(proxy.port, queue, ledger, prefetch=10)
        self.addCleanup(pub.stop, 5)
        self.addCleanup(con.stop, 5)
        con.start()
        pub.start()
        return queue, ledger, pub, con

    def finish_bystander(self, queue, ledger, pub, con):
        pub.stop()
        poison = sum(1 for i in ledger.confirmed if fs.number_of(i) % 25 == 0)
        fs.wait_drained(ledger, queue, 30, dlq_expected=poison)
        con.stop()
        account = ledger.account(*fs.final_count(NODE, queue))
        self.assert_no_loss(account, "bystander")
        return account

    def account(self, ledger, queue, what, extra_queues=(), poison_every=25):
        types = NODE.queue_types(queue)
        dlq, delayed, queued = fs.final_count(NODE, queue, extra_queues)
        account = ledger.account(dlq, delayed, queued)
        fs.log(f"{what}: {fs.Ledger.summary(account)}")
        self.record(account=account)
        self.assert_no_loss(account, what)
        self.assert_only_poison_dead_lettered(dlq, poison_every, what)
        self.assertEqual(types.get(queue), fs.QUEUE_TYPE, f"{what}: the queue's type: {types}")
        self.assert_proxy_queues_typed(NODE, queue, what)
        return account

    # ------------------------------------------------------------ (2) consumer kill -9
    def test_consumer_killed_holding_unacked_and_delayed(self):
        queue = self.queue("conskill")
        policy = fs.policy_yaml(queue, 3, requeue="delayed",
                                backoff={"initial": "1s", "multiplier": 2, "max": "2s",
                                         "jitter": "none"},
                                rate=fs.NO_RATE_LIMITS)
        proxy = self.start_proxy(policies={"q.yaml": policy})
        ledger = fs.Ledger("conskill")
        pub = fs.Publisher(proxy.port, queue, ledger, "ck", rate=80)
        self.addCleanup(pub.stop, 5)
        pub.start()
        events = os.path.join(proxy.dir, "consumer-events.txt")
        children = []

        child_log = os.path.join(proxy.dir, "consumer-stderr.txt")

        def spawn():
            with open(child_log, "ab") as err:
                child = subprocess.Popen(
                    [sys.executable, os.path.join(fs.HERE, "faults_support.py"), "consume",
                     str(proxy.port), queue, events, "50", "40", "1000", "25", "7"],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
            children.append(child)
            self.addCleanup(lambda: child.poll() is None and (child.kill(), child.wait()))
            return child

        delay_queue = f"nackguard.delay.{queue}.1000ms"
        self.queues_to_delete += [delay_queue, f"nackguard.delay.{queue}.2000ms"]
        kills = []
        for round_ in range(2):
            child = spawn()
            time.sleep(4.5)
            if child.poll() is not None:
                with open(child_log, errors="replace") as f:
                    self.fail(f"consumer {round_} exited by itself: {f.read()[-2000:]}")
            # The consumer acks in batches, so it holds unacked deliveries most of the time,
            # but the broker's count can read 0 between two batches (CI once read it twice):
            # kill at a moment it reads more, as the test means to.
            unacked = [0]

            def holds_unacked():
                unacked[0] = NODE.queues(queue).get(queue, (None, 0))[1]
                return unacked[0] > 0

            fs.wait_until(holds_unacked, 15, 0.1)
            unacked = unacked[0]
            waiting_delayed = fs.message_count(delay_queue)
            child.send_signal(signal.SIGKILL)
            child.wait()
            kills.append({"unacked_at_kill": unacked, "in_delay_queue_at_kill": waiting_delayed})
            fs.log(f"consumer kill {round_}: {kills[-1]}")
        time.sleep(1)
        pub.stop()
        final = spawn()
        poison = sum(1 for i in ledger.confirmed if fs.number_of(i) % 25 == 0)

        def settled():
            fresh = fs.Ledger("probe")
            fresh.confirmed = set(ledger.confirmed)
            fs.read_consumer_events(events, fresh)
            missing = fresh.unconsumed_confirmed()
            dlq = fs.message_count(f"{queue}.dlq") or 0
            return fs.message_count(queue) == 0 and missing <= dlq and dlq >= poison

        drained = fs.wait_until(settled, 60, 0.5)
        time.sleep(1)
        final.send_signal(signal.SIGTERM)
        final.wait(10)
        time.sleep(0.5)
        fs.read_consumer_events(events, ledger)
        metrics = proxy.metrics()
        account = self.account(ledger, queue, "consumer kill -9")
        self.record(fault="consumer kill -9 (x2) holding unacked deliveries and delayed "
                          "republishes (requeue: delayed)",
                    kills=kills, drained=drained,
                    returns_total=sum(v for k, v in metrics.items()
                                      if k.startswith("nackguard_returns_total")),
                    requeues={k.split("action=")[1].split('"')[1]: v for k, v in metrics.items()
                              if k.startswith("nackguard_requeues_total")},
                    fallbacks=proxy.metric_sum("nackguard_fallbacks_total"),
                    fallback_causes={k.split("cause=")[1].split('"')[1]: v
                                     for k, v in metrics.items()
                                     if k.startswith("nackguard_fallbacks_total") and v},
                    fallback_log=[line.split(" ", 2)[-1][:200]
                                  for line in proxy.log_lines("fallback")[:3]])
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
        policy = fs.policy_yaml(queue, 2, requeue="delayed",
                                backoff={"initial": "300ms", "multiplier": 1, "max": "300ms",
                                         "jitter": "none"},
                                rate=fs.NO_RATE_LIMITS)
        self.queues_to_delete.append(f"nackguard.delay.{queue}.300ms")
        proxy = self.start_proxy(policies={"q.yaml": policy})
        ledger = fs.Ledger("proxykill")
        decide = fs.standard_decide(poison_every=3, flaky_every=5)
        # A backlog with one poison message in three: the consumer's first pass is a burst
        # of nacks, which the proxy turns into delayed republishes and, at the third return,
        # dead-letters.
        fs.preload(queue, 1000, ledger, "pk")
        pub = fs.Publisher(proxy.port, queue, ledger, "pkl", rate=80)
        con = fs.Consumer(proxy.port, queue, ledger, decide=decide, prefetch=50)
        self.addCleanup(pub.stop, 5)
        self.addCleanup(con.stop, 5)
        con.start()
        pub.start()
        burst = fs.wait_until(lambda: (fs.message_count(f"{queue}.dlq") or 0) >= 40, 40, 0.05)
        before = proxy.metrics()
        t_kill = time.monotonic()
        proxy.kill9()
        dlq_at_kill = fs.message_count(f"{queue}.dlq")
        self.assertTrue(burst, "no dead-letter burst before the kill")
        pub_err = fs.wait_until(lambda: pub.events.since(t_kill, "error"), 10, 0.05)
        con_err = fs.wait_until(lambda: con.events.since(t_kill, "error"), 10, 0.05)
        time.sleep(1.5)
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
        time.sleep(0.5)
        account = self.account(ledger, queue, "proxy kill -9", poison_every=3)
        errors = sorted({d for _, _, d in pub.events.since(t_kill, "error")
                         + con.events.since(t_kill, "error")})
        self.record(fault="proxy kill -9 during a republish/dead-letter burst, restart",
                    dlq_at_kill=dlq_at_kill, drained=drained, restart_s=round(restart_s, 2),
                    metrics_before_kill={
                        "dead_letters": sum(v for k, v in before.items()
                                            if k.startswith("nackguard_dead_letters_total")),
                        "delayed": sum(v for k, v in before.items()
                                       if k.startswith("nackguard_requeues_total")
                                       and "delayed" in k)},
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
        pub = fs.Publisher(proxy.port, queue, ledger, "pst", rate=100, heartbeat=hb)
        con = fs.Consumer(proxy.port, queue, ledger, prefetch=20, heartbeat=hb)
        self.addCleanup(pub.stop, 5)
        self.addCleanup(con.stop, 5)
        con.start()
        pub.start()
        time.sleep(3)
        self.addCleanup(lambda: proxy.alive() and os.kill(proxy.pid, signal.SIGCONT))
        t_stop = time.monotonic()
        os.kill(proxy.pid, signal.SIGSTOP)
        try:
            got_pub = fs.wait_until(lambda: pub.events.since(t_stop, "error"), 15, 0.05)
            got_con = fs.wait_until(lambda: con.events.since(t_stop, "error"), 15, 0.05)
            remaining = 10 - (time.monotonic() - t_stop)
            if remaining > 0:
                time.sleep(remaining)
        finally:
            os.kill(proxy.pid, signal.SIGCONT)
        t_cont = time.monotonic()
        self.assertTrue(got_pub and got_con, "a client never noticed the stalled proxy")
        pub_err = pub.events.since(t_stop, "error")[0]
        con_err = con.events.since(t_stop, "error")[0]
        back = fs.wait_until(lambda: pub.events.since(t_cont, "connected")
                             and con.events.since(t_cont, "connected"), 40, 0.1)
        self.assertTrue(back, "the clients did not reconnect after SIGCONT")
        time.sleep(3)
        self.assertTrue(pub.stop(), "the publisher thread is stuck")
        poison = sum(1 for i in ledger.confirmed if fs.number_of(i) % 25 == 0)
        drained = fs.wait_drained(ledger, queue, 45, dlq_expected=poison)
        self.assertTrue(con.stop(), "the consumer thread is stuck")
        self.account(ledger, queue, "proxy stall (SIGSTOP)")
        closes = {"publisher": round(pub_err[0] - t_stop, 2), "consumer": round(con_err[0] - t_stop, 2)}
        self.record(fault="proxy stalled (SIGSTOP 10 s, SIGCONT), clients with heartbeat 2",
                    heartbeat=hb, close_after_s=closes, errors=[pub_err[2], con_err[2]],
                    drained=drained)
        check = hb + 5  # pika 1.2: HeartbeatChecker._check_interval
        self.assertLess(max(closes.values()), 2 * check + 1.5,
                        f"pika noticed the stalled proxy only after {closes}")
        for error in (pub_err[2], con_err[2]):
            self.assertTrue(error.startswith(("AMQPHeartbeatTimeout", "StreamLostError")), error)
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
        client = rawamqp.Client(proxy.port, timeout=10, rcvbuf=65536)
        self.addCleanup(client.abort)
        client.handshake()
        client.open_channel(1)
        client.send(rawamqp.basic_qos(1, 0))
        client.expect(rawamqp.BASIC_QOS_OK)
        client.send(rawamqp.basic_consume(1, queue))
        client.expect(rawamqp.BASIC_CONSUME_OK)
        time.sleep(4)  # not reading at all: the broker could send all 80 MB meanwhile
        peak_stalled = sampler.max_rss_kb()
        retained_stalled = proxy.metric_sum("nackguard_retained_body_bytes")
        # Every 500th message is nacked (requeue) once; the rest are acked, multiple=true,
        # after each read.
        taken = collections.Counter()

        def read_and_settle(seconds):
            client.pump(seconds)
            last = None
            for d in client.deliveries:
                if d is None:
                    continue
                if fs.number_of(d.id) % 500 == 0 and not d.redelivered:
                    if last is not None:
                        client.send(rawamqp.basic_ack(1, last, multiple=True))
                        last = None
                    client.send(rawamqp.basic_nack(1, d.tag, requeue=True))
                    ledger.returned(d.id)
                    continue
                ledger.consume(d.id)
                taken[d.id] += 1
                last = d.tag
            client.deliveries.clear()
            if last is not None:
                client.send(rawamqp.basic_ack(1, last, multiple=True))

        slow_until = time.monotonic() + 3
        while time.monotonic() < slow_until:  # slow: ~10 ms of reading every 100 ms
            read_and_settle(0.01)
            time.sleep(0.09)
        slow_taken = len(taken)
        deadline = time.monotonic() + 60
        while len(taken) < 20000 and time.monotonic() < deadline:
            read_and_settle(0.05)
        client.close()
        sampler.stop()
        peak = sampler.max_rss_kb()
        by_account = self.finish_bystander(*bystander)
        account = self.account(ledger, queue, "slow consumer (not reading)")
        self.record(fault="slow consumer, prefetch 0, 20k x 4 KiB queued: stops reading 4 s, "
                          "then reads slowly, then drains (acking as it goes)",
                    rss_kb_baseline=baseline, rss_kb_peak_not_reading=peak_stalled,
                    retained_bytes_not_reading=retained_stalled, taken_while_slow=slow_taken,
                    rss_kb_peak=peak, bystander=by_account)
        self.assertEqual(len(taken), 20000, fs.Ledger.summary(account))
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
        retained = []
        halt = threading.Event()

        def sample_retained():
            while not halt.is_set():
                retained.append(proxy.metric_sum("nackguard_retained_body_bytes"))
                halt.wait(0.2)

        watcher = threading.Thread(target=sample_retained, daemon=True)
        watcher.start()
        self.addCleanup(halt.set)
        slow = fs.Consumer(proxy.port, queue, ledger, prefetch=0, work=0.0005,
                           decide=lambda i, r, h: "ack", name="pika-slow")
        self.addCleanup(slow.stop, 5)
        slow.start()
        ok = fs.wait_until(lambda: len(ledger.consumed) >= 20000, 120, 0.5)
        slow.stop()
        sampler.stop()
        halt.set()
        watcher.join(5)
        peak = sampler.max_rss_kb()
        by_account = self.finish_bystander(*bystander)
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
    # How long no new connection may open before the clients stop waiting for the others. A
    # 4.0 or 4.3 node pauses its handshakes about 5 s now and then under a burst: 300
    # connections straight to the 4.3 node, no nackguard, stalled 5.0 s in 3 runs of 4 here
    # (3.10: none). A stall shorter than this is waited out; a longer one fails the test.
    STALL_S = 10

    def many_connections(self, proxy, n_conns, queue, prefix, gate_size=100):
        """n_conns raw asyncio clients through `proxy`, all at once: handshake, channels
        1-3, confirm.select and one persistent publish on channel 1 (its confirm awaited),
        then each stays open until all are (or until no more open for STALL_S), closes
        channels 2 and 3 and the connection. Returns (ledger, stats)."""
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < 3 * n_conns + 200:
            if hard < 3 * n_conns + 200:
                self.skipTest(f"RLIMIT_NOFILE hard limit {hard} is too low for {n_conns} "
                              "connections")
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        ledger = fs.Ledger(prefix)
        state = {"open": 0, "peak_open": 0}
        release = None

        async def work(conn, index, opened):
            for ch in (1, 2, 3):
                await conn.send(rawamqp.channel_open(ch))
                await conn.expect(rawamqp.CHANNEL_OPEN_OK, ch)
            await conn.send(rawamqp.confirm_select(1))
            await conn.expect(rawamqp.CONFIRM_SELECT_OK, 1)
            msg_id = f"{prefix}-{index:06d}"
            ledger.publish(msg_id)
            await conn.send(rawamqp.publish_frames(1, "", queue, fs.body_for(msg_id, 128),
                                                   conn.frame_max, msg_id, persistent=True))
            ack = await conn.expect(rawamqp.BASIC_ACK, 1)
            if struct.unpack_from(">Q", ack.args, 0)[0] == 1:
                ledger.confirm(msg_id)
            opened()
            state["open"] += 1
            state["peak_open"] = max(state["peak_open"], state["open"])
            await release.wait()
            state["open"] -= 1
            for ch in (2, 3):
                await conn.send(rawamqp.channel_close(ch))
                await conn.expect(rawamqp.CHANNEL_CLOSE_OK, ch)

        async def one(index, gate):
            # at most `gate_size` connections in their handshake at once, to keep the
            # machine responsive; once open, a connection frees its slot and stays open
            await gate.acquire()
            freed = False

            def opened():
                nonlocal freed
                if not freed:
                    freed = True
                    gate.release()

            try:
                return await asyncio.wait_for(
                    rawamqp.async_session(proxy.port, lambda c: work(c, index, opened)), 90)
            finally:
                opened()

        async def main():
            nonlocal release
            release = asyncio.Event()
            gate = asyncio.Semaphore(gate_size)
            tasks = [asyncio.ensure_future(one(i, gate)) for i in range(1, n_conns + 1)]
            t0 = time.monotonic()
            last, last_change = -1, time.monotonic()
            while time.monotonic() - t0 < 60:
                if state["open"] != last:
                    last, last_change = state["open"], time.monotonic()
                if state["open"] >= n_conns or time.monotonic() - last_change > self.STALL_S:
                    break
                await asyncio.sleep(0.05)
            held = state["open"]
            held_s = time.monotonic() - t0
            await asyncio.sleep(0.5)  # let the sampler see them all
            release.set()
            results = await asyncio.gather(*tasks, return_exceptions=True)
            return results, held, held_s, time.monotonic() - t0

        fd_base = fs.settled_fd_count(proxy.pid)
        rss_base = proxy.rss_kb()
        conns_base = proxy.metric_sum("nackguard_client_connections")
        sampler = fs.Sampler(proxy.pid, 0.1)
        sampler.start()
        self.addCleanup(sampler.stop)
        results, held, held_s, total_s = asyncio.run(main())
        failures = [repr(r) for r in results if isinstance(r, BaseException)]
        t_closed = time.monotonic()
        back = fs.wait_until(lambda: proxy.fds() == fd_base, 5, 0.05)
        fd_back_s = time.monotonic() - t_closed
        fd_after = proxy.fds()
        # The proxy gives freed heap back at most once a second after connections close.
        fs.wait_until(lambda: proxy.rss_kb() - rss_base < 20 * 1024, 3, 0.1)
        rss_after = proxy.rss_kb()
        sampler.stop()
        stats = dict(connections=n_conns, failures=len(failures),
                     failure_examples=failures[:3], open_at_once=held,
                     open_phase_s=round(held_s, 1), total_s=round(total_s, 1),
                     fd_baseline=fd_base, fd_peak=sampler.max_fds(), fd_after=fd_after,
                     fd_back=back, fd_back_after_s=round(fd_back_s, 2),
                     rss_kb_baseline=rss_base, rss_kb_peak=sampler.max_rss_kb(),
                     rss_kb_after=rss_after,
                     client_connections_metric=(conns_base,
                                                proxy.metric_sum("nackguard_client_connections")))
        fs.log(f"{n_conns} connections through {proxy.name}: {stats}")
        return ledger, stats

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
        ledger, stats = self.many_connections(proxy, 1000, "scripted", "cs")
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
        time.sleep(2)
        ledger, stats = self.many_connections(proxy, 300, queue, "cn", gate_size=50)
        by_account = self.finish_bystander(*bystander)
        account = ledger.account(queued=fs.drain_ids(queue))
        self.record(fault="300 concurrent client connections (3 channels, 1 confirmed "
                          "publish, close) through the proxy to the private node",
                    account=account, bystander=by_account, **stats)
        self.check_connection_stats(stats, ledger, account)


if __name__ == "__main__":
    unittest.main()
