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
"""

import collections
import json
import os
import socket
import struct
import threading
import time
import unittest

import faults_support as fs
import rawamqp as raw

NODE = None
EOF_WITHIN = 5.0


def setUpModule():
    global NODE
    NODE = fs.start_module_node()


def tearDownModule():
    fs.stop_module_node()


def open_client(port, heartbeat=0, channel=True):
    c = raw.Client(port, timeout=5)
    c.handshake(heartbeat=heartbeat)
    if channel:
        c.open_channel(1)
    return c


def outcome(client, send=None, timeout=EOF_WITHIN):
    """Sends `send`, then reads until EOF: what came back (connection.close code, EOF,
    seconds)."""
    out = {"close": None, "eof": False, "error": None}
    t0 = time.monotonic()
    try:
        if send:
            client.sock.sendall(send)
    except OSError as exc:
        out["send_error"] = type(exc).__name__
    deadline = t0 + timeout
    try:
        while time.monotonic() < deadline:
            try:
                f = client.read_frame(max(0.01, deadline - time.monotonic()))
            except socket.timeout:
                break
            if f.method == raw.CONNECTION_CLOSE:
                out["close"] = raw.parse_close(f)
                try:
                    client.sock.sendall(raw.connection_close_ok())
                except OSError:
                    pass
            elif f.method == raw.CHANNEL_CLOSE:
                out.setdefault("channel_close", raw.parse_close(f))
    except raw.PeerClosed:
        out["eof"] = True
    except ConnectionResetError:
        out["eof"] = True
        out["reset"] = True
    except (OSError, ValueError) as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    out["seconds"] = round(time.monotonic() - t0, 2)
    client.abort()
    return out


def short(o):
    code = o["close"][0] if o.get("close") else None
    text = o["close"][1][:60] if o.get("close") else None
    return {"code": code, "text": text, "eof": o["eof"], "s": o["seconds"],
            **({"channel_close": o["channel_close"][0]} if o.get("channel_close") else {})}


def run_all(calls):
    """Runs {key: (fn, arg)} at once, each in its own thread; {key: fn(arg)}. The first
    exception is raised here, once all have ended."""
    out = {}

    def run(key, fn, arg):
        try:
            out[key] = fn(arg)
        except BaseException as exc:  # re-raised below, in the test's thread
            out[key] = exc

    threads = [threading.Thread(target=run, args=(key, fn, arg), daemon=True)
               for key, (fn, arg) in calls.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for key in calls:
        if key not in out:
            raise TimeoutError(f"{key} did not end within 60 s")
        if isinstance(out[key], BaseException):
            raise out[key]
    return out


class HostileInputTest(fs.FaultTest):
    proxy = None

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.proxy = fs.FaultProxy("hostile", handshake="2s", policies={
            "all.yaml": fs.policy_yaml("faults.*", 3, rate=fs.NO_RATE_LIMITS)}).start()
        cls.proxy.shared = True

    @classmethod
    def tearDownClass(cls):
        cls.proxy.stop()
        cls.proxy.remove_dir()
        super().tearDownClass()

    def setUp(self):
        super().setUp()
        self.proxies.append(self.proxy)  # its log is printed if the test fails
        self.assertTrue(self.proxy.alive(), "the shared proxy died in an earlier test")
        self.by_queue = self.queue("hostileby")
        self.by_ledger = fs.Ledger("bystander")
        self.by_pub = fs.Publisher(self.proxy.port, self.by_queue, self.by_ledger, "hb",
                                   rate=40, name="bystander-publisher")
        self.by_con = fs.Consumer(self.proxy.port, self.by_queue, self.by_ledger, prefetch=10,
                                  name="bystander-consumer")
        self.addCleanup(self.by_pub.stop, 5)
        self.addCleanup(self.by_con.stop, 5)
        self.by_con.start()
        self.by_pub.start()
        fs.wait_until(lambda: self.by_pub.connects and self.by_con.connects, 10)
        self.rss_before = self.proxy.rss_kb()
        self.sampler = fs.Sampler(self.proxy.pid, 0.05)
        self.sampler.start()
        self.addCleanup(self.sampler.stop)

    def finish(self):
        """The bystander was never disconnected and lost nothing; the proxy is alive."""
        self.assertTrue(self.proxy.alive(), f"the proxy exited: {self.proxy.process.returncode}")
        self.sampler.stop()
        fs.wait_until(lambda: len(self.by_ledger.confirmed) > 20, 10)
        self.by_pub.stop()
        poison = sum(1 for i in self.by_ledger.confirmed if fs.number_of(i) % 25 == 0)
        fs.wait_drained(self.by_ledger, self.by_queue, 30, dlq_expected=poison)
        self.by_con.stop()
        errors = [d for _, k, d in self.by_pub.events.events + self.by_con.events.events
                  if k == "error"]
        account = self.by_ledger.account(*fs.final_count(NODE, self.by_queue))
        self.record(bystander=account, bystander_errors=errors[:3],
                    rss_kb_before=self.rss_before, rss_kb_peak=self.sampler.max_rss_kb())
        self.assertEqual(errors, [], "the bystander's connections were disturbed")
        self.assertEqual((self.by_pub.connects, self.by_con.connects), (1, 1))
        self.assert_no_loss(account, "bystander")

    def assert_clean(self, o, what, codes=None):
        self.assertIsNone(o.get("error"), f"{what}: {o}")
        self.assertTrue(o["eof"], f"{what}: no EOF within {EOF_WITHIN}s: {o}")
        self.assertLess(o["seconds"], EOF_WITHIN + 0.5, f"{what}: {o}")
        if codes is not None:
            self.assertIsNotNone(o["close"], f"{what}: EOF without connection.close: {o}")
            self.assertIn(o["close"][0], codes, f"{what}: {o}")

    def both(self, make, concurrent=True, **kw):
        """Runs a case against the broker directly and through the proxy; at the same time
        unless told otherwise (the broker's answer is only recorded, and is often a silence
        of several seconds)."""
        if not concurrent:
            return {"broker": make(fs.BROKER_PORT, **kw), "proxy": make(self.proxy.port, **kw)}
        return self.each_both({None: make})[None]

    def each_both(self, cases):
        """Runs every case of {name: make(port)} against the broker and through the proxy,
        all at once, each on its own connection; {name: {"broker": ..., "proxy": ...}}."""
        calls = {(name, side): (make, port) for name, make in cases.items()
                 for side, port in (("broker", fs.BROKER_PORT), ("proxy", self.proxy.port))}
        return {name: {side: r for (n, side), r in run_all(calls).items() if n == name}
                for name in cases}

    # ------------------------------------------------------------ oversize frames
    def test_huge_frame_lengths(self):
        results = {}

        def after_handshake(port):
            c = open_client(port)
            return outcome(c, struct.pack(">BHI", raw.FRAME_METHOD, 1, 0xFFFFFFF0) + b"\0" * 64)

        def before_tune(port):
            c = raw.Client(port, timeout=5)
            c.send(raw.PROTOCOL_HEADER)
            c.expect(raw.CONNECTION_START)
            # start-ok announced as 100 MB (frame_max is not even negotiated yet)
            return outcome(c, struct.pack(">BHI", raw.FRAME_METHOD, 0, 100 * 1024 * 1024)
                           + b"\0" * 4096)

        def body_bigger_than_frame_max(port):
            # a complete 1 MiB body frame where frame_max is 128 KiB, inside a real message
            c = open_client(port)
            publish = raw.method_frame(1, raw.BASIC_PUBLISH, struct.pack(">H", 0)
                                       + raw.shortstr("") + raw.shortstr(self.by_queue)
                                       + b"\0")
            header = raw.content_header(1, 1 << 20)
            return outcome(c, publish + header + raw.frame(raw.FRAME_BODY, 1, b"b" * (1 << 20)))

        runs = self.each_both({"4 GiB length after the handshake": after_handshake,
                               "100 MB start-ok before tune": before_tune,
                               "1 MiB body frame, frame_max 128 KiB": body_bigger_than_frame_max})
        for name, r in runs.items():
            results[name] = {k: short(v) for k, v in r.items()}
            with self.subTest(case=name):
                self.assert_clean(r["proxy"], name)
        peak = self.sampler.max_rss_kb()
        self.record(fault="frames far larger than frame_max", cases=results)
        self.assertLess(peak - self.rss_before, 16 * 1024,
                        f"RSS grew from {self.rss_before} to {peak} KiB")
        self.finish()

    # ------------------------------------------------------------ frame-level oddities
    def test_bad_frames_mid_message_and_unknown_methods(self):
        q = self.by_queue
        publish = raw.method_frame(1, raw.BASIC_PUBLISH, struct.pack(">H", 0) + raw.shortstr("")
                                   + raw.shortstr(q) + b"\0")
        cases = {
            "bad end octet on a body frame mid-message":
                (publish + raw.content_header(1, 10) + raw.frame(raw.FRAME_BODY, 1, b"12345")
                 + raw.frame(raw.FRAME_BODY, 1, b"67890", end=0x00), {501}),
            "basic.publish then a body frame, no header":
                (publish + raw.frame(raw.FRAME_BODY, 1, b"hello"), {505}),
            "unknown class 999 on channel 1":
                (raw.method_frame(1, (999, 1), b"\0\0\0\0"), None),
            "unknown class 999 on channel 0":
                (raw.method_frame(0, (999, 1), b"\0\0\0\0"), None),
            "unknown method 999 of class basic":
                (raw.method_frame(1, (60, 999), b"\0\0\0\0"), None),
            "channel.open on the proxy's reserved channel (offered channel_max + 1)":
                ("reserved", None),
        }
        results = {}

        def case_for(payload):
            def case(port):
                c = open_client(port)
                return outcome(c, raw.channel_open(c.tune[0] + 1) if payload == "reserved"
                               else payload)
            return case

        # One case at a time (its broker-direct run alongside): all twelve connections at once
        # made this test take 33 s instead of 10.
        for name, (payload, codes) in cases.items():
            r = self.both(case_for(payload))
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
        def case(port):
            c = open_client(port, heartbeat=2)
            frame = raw.method_frame(1, raw.BASIC_QOS, struct.pack(">IHB", 0, 10, 0))
            return outcome(c, frame[:6], timeout=10)  # the rest never comes
        r = self.both(case)
        self.record(fault="truncated frame, then silence (heartbeat 2)",
                    cases={k: short(v) for k, v in r.items()},
                    proxy_log=self.proxy.log_lines("sent nothing for")[-1:])
        self.assert_clean(r["proxy"], "truncated frame then silence", None)
        self.assertLess(r["proxy"]["seconds"], 2 * 2 + 2.0, r["proxy"])
        self.finish()

    # ------------------------------------------------------------ deep field tables
    def test_field_tables_nested_10000_deep(self):
        depth = 10000
        deep = raw.nested_table(depth)
        self.assertLess(len(deep), 100000)
        results = {}

        # (a) in method arguments, through the proxy and directly
        def declare_deep(port):
            c = open_client(port)
            args = struct.pack(">H", 0) + raw.shortstr(fs.unique_queue("deepdecl")) + b"\0" + deep
            return outcome(c, raw.method_frame(1, raw.QUEUE_DECLARE, args))

        def consume_deep(port):
            c = open_client(port)
            args = (struct.pack(">H", 0) + raw.shortstr(self.by_queue) + raw.shortstr("")
                    + b"\0" + deep)
            return outcome(c, raw.method_frame(1, raw.BASIC_CONSUME, args))

        runs = self.each_both({"queue.declare arguments": declare_deep,
                               "basic.consume arguments": consume_deep})
        for name, r in runs.items():
            results[name] = {k: short(v) for k, v in r.items()}
            with self.subTest(case=name):
                self.assert_clean(r["proxy"], name)
                self.assertTrue(self.proxy.alive(), f"{name}: the proxy died")

        # (b) in a publish's headers through the proxy: refused or accepted, never a crash
        ledger = fs.Ledger("deep")
        queue = self.queue("deep")
        c = open_client(self.proxy.port)
        c.confirm_select(1)
        ledger.publish("deep-000001")
        c.send(raw.publish_frames(1, "", queue, fs.body_for("deep-000001", 64), c.frame_max,
                                  message_id="deep-000001", persistent=True, headers_raw=deep))
        try:
            confirmed = c.wait_confirms(1, 10) and 1 in c.confirmed
            through_proxy = {"confirmed": confirmed}
        except raw.ConnectionClosedByPeer as exc:
            through_proxy = {"closed": (exc.code, exc.text[:80])}
        c.abort()
        if through_proxy.get("confirmed"):
            ledger.confirm("deep-000001")
        results["publish headers, through the proxy"] = through_proxy
        self.assertTrue(self.proxy.alive(), "publishing a deep table killed the proxy")

        # (c) the broker accepts it directly; then it is delivered through the proxy to a
        # consumer that nacks it until the policy (3) dead-letters it, or the proxy gives up
        c = open_client(fs.BROKER_PORT)
        c.confirm_select(1)
        ledger.publish("deep-000002")
        c.send(raw.publish_frames(1, "", queue, fs.body_for("deep-000002", 64), c.frame_max,
                                  message_id="deep-000002", persistent=True, headers_raw=deep))
        self.assertTrue(c.wait_confirms(1, 10) and 1 in c.confirmed,
                        "the broker did not confirm the deep-headers message")
        ledger.confirm("deep-000002")
        c.close()
        deliveries = []
        closes = []
        c = None
        idle_since = time.monotonic()
        deadline = time.monotonic() + 25
        while time.monotonic() < deadline and len(closes) <= 5 and len(deliveries) < 20:
            try:
                if c is None:
                    c = open_client(self.proxy.port)
                    c.send(raw.basic_qos(1, 1))
                    c.expect(raw.BASIC_QOS_OK)
                    c.send(raw.basic_consume(1, queue))
                    c.expect(raw.BASIC_CONSUME_OK)
                c.pump(0.1)
                for d in c.deliveries:
                    if d is not None:
                        deliveries.append((d.id, d.redelivered))
                        c.send(raw.basic_nack(1, d.tag, requeue=True))
                        idle_since = time.monotonic()
                c.deliveries.clear()
                if time.monotonic() - idle_since > 1.5:  # a redelivery takes milliseconds
                    break
            except (raw.ConnectionClosedByPeer, raw.PeerClosed, OSError) as exc:
                closes.append(f"{type(exc).__name__}: {exc}"[:120])
                if c is not None:
                    c.abort()
                c = None
        if c is not None:
            c.close()
        time.sleep(1)
        dlq, delayed, queued = fs.final_count(NODE, queue)
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
        def silent(port):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            c = raw.Client.__new__(raw.Client)
            c.sock, c.buffer, c.frames = s, bytearray(), []
            return c

        def after_header(port):
            c = raw.Client(port, timeout=10)
            c.send(raw.PROTOCOL_HEADER)
            return c

        def after_start_ok(port):
            c = after_header(port)
            c.expect(raw.CONNECTION_START)
            c.send(raw.start_ok())
            return c

        def after_tune_ok(port):
            c = after_start_ok(port)
            tune = c.expect(raw.CONNECTION_TUNE)
            cm, fm, hb = struct.unpack_from(">HIH", tune.args, 0)
            c.send(raw.tune_ok(cm, fm, 0))
            return c

        def timed(fn):
            def run(port):
                t0 = time.monotonic()
                o = outcome(fn(port), None, timeout=8)
                o["seconds"] = round(time.monotonic() - t0, 2)
                return o
            return run

        cases = {"TCP connect, nothing sent": silent,
                 "protocol header only": after_header,
                 "start-ok, no tune-ok": after_start_ok,
                 "tune-ok, no connection.open": after_tune_ok}
        runs = run_all({name: (timed(fn), self.proxy.port) for name, fn in cases.items()})
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
        n = 5000

        def flood(port):
            c = open_client(port, channel=False)
            t0 = time.monotonic()
            c.sock.sendall(b"".join(raw.channel_open(ch) for ch in range(1, n + 1)))
            opened = 0
            close = None
            deadline = t0 + 30
            try:
                while time.monotonic() < deadline and opened < n:
                    f = c.read_frame(max(0.01, deadline - time.monotonic()))
                    if f.method == raw.CHANNEL_OPEN_OK:
                        opened += 1
                    elif f.method == raw.CONNECTION_CLOSE:
                        close = raw.parse_close(f)
                        c.sock.sendall(raw.connection_close_ok())
                        break
            except (raw.PeerClosed, OSError):
                pass
            seconds = time.monotonic() - t0
            c.abort()
            return {"opened": opened, "close": close and (close[0], close[1][:70]),
                    "s": round(seconds, 2), "channel_max": c.tune[0]}

        def cycles(port, rounds=5, width=1000):
            # 5,000 channel.open within channel_max: channels 1..1000 opened and closed,
            # pipelined, 5 times (a channel may be reopened only after its close-ok); every
            # one must open and close
            c = open_client(port, channel=False)
            t0 = time.monotonic()
            opened = closed = 0
            close = None
            deadline = t0 + 30
            try:
                for _ in range(rounds):
                    c.sock.sendall(b"".join(raw.channel_open(ch) for ch in range(1, width + 1))
                                   + b"".join(raw.channel_close(ch)
                                              for ch in range(1, width + 1)))
                    target = closed + width
                    while closed < target and time.monotonic() < deadline:
                        f = c.read_frame(max(0.01, deadline - time.monotonic()))
                        if f.method == raw.CHANNEL_OPEN_OK:
                            opened += 1
                        elif f.method == raw.CHANNEL_CLOSE_OK:
                            closed += 1
                        elif f.method == raw.CONNECTION_CLOSE:
                            close = raw.parse_close(f)
                            raise raw.PeerClosed(detail="connection.close")
            except (raw.PeerClosed, OSError, socket.timeout):
                pass
            seconds = time.monotonic() - t0
            c.close()
            return {"opened": opened, "closed": closed, "close": close, "s": round(seconds, 2)}

        within = self.both(cycles, concurrent=False)  # timed: one at a time
        direct = flood(fs.BROKER_PORT)
        # through the proxy, while a fresh pika connection is timed
        result = {}
        t = threading.Thread(target=lambda: result.update(flood(self.proxy.port)))
        t.start()
        time.sleep(0.2)
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
        policy_path = "reload.yaml"
        proxy = fs.FaultProxy("reload", handshake="2s", policies={
            policy_path: fs.policy_yaml(queue, 1, rate=fs.NO_RATE_LIMITS)}).start()
        self.proxies.append(proxy)
        self.addCleanup(proxy.cleanup)
        ledger = fs.Ledger("reload")
        # every message is poison: its dead-letter line tells the policy in force
        decide = fs.standard_decide(poison_every=1, flaky_every=0)
        pub = fs.Publisher(proxy.port, queue, ledger, "rl", rate=20)
        con = fs.Consumer(proxy.port, queue, ledger, decide=decide, prefetch=5)
        self.addCleanup(pub.stop, 5)
        self.addCleanup(con.stop, 5)
        con.start()
        pub.start()

        def returns_in_force(since_line):
            lines = [l for l in proxy.full_log().splitlines()[since_line:]
                     if "dead-lettered:" in l and queue in l]
            return sorted({int(l.split("returns=")[1].split()[0]) for l in lines})

        def log_len():
            return len(proxy.full_log().splitlines())

        self.assertTrue(fs.wait_until(lambda: returns_in_force(0), 20), proxy.log_text())
        self.assertEqual(returns_in_force(0), [2], "max_redeliveries 1 = dead-lettered at 2")
        garbage = {
            "garbage": "queue: [unterminated\n\x00\x01 max_redeliveries: {\n",
            "half-written": f"queue: {json.dumps(queue)}\nmax_redel",
            "bad value": f"queue: {json.dumps(queue)}\nmax_redeliveries: -5\n",
            "empty": "",
        }
        path = os.path.join(proxy.policies_dir, policy_path)
        failed_lines = []
        for name, text in garbage.items():
            with open(path, "w") as f:  # not atomic on purpose
                f.write(text)
            mark = log_len()
            proxy.sighup()
            self.assertTrue(fs.wait_until(
                lambda: any("reload failed" in l for l in proxy.full_log().splitlines()[mark:]),
                5), f"{name}: no 'reload failed' line")
            failed_lines.append(name)
        mark = log_len()
        # every message is a poison: dead-letters go on, and say which policy is in force
        self.assertTrue(fs.wait_until(lambda: returns_in_force(mark), 20),
                        "no dead-letter after the corrupt files")
        old_kept = returns_in_force(mark)
        # a storm: writes racing SIGHUPs, valid and corrupt text alternating
        valid2 = fs.policy_yaml(queue, 2, rate=fs.NO_RATE_LIMITS)
        for i in range(100):
            text = valid2 if i % 2 else garbage["half-written"]
            with open(path, "w") as f:
                f.write(text[: len(text) // 2])
                f.flush()
                proxy.sighup()
                f.write(text[len(text) // 2:])
            time.sleep(0.01)
        self.assertTrue(proxy.alive(), "the proxy died during the reload storm")
        # finally a valid file and one more reload: the new policy is in force
        proxy.write_policy(policy_path, valid2)
        mark = log_len()
        proxy.sighup()
        self.assertTrue(fs.wait_until(
            lambda: any("reload:" in l and "policies loaded" in l
                        for l in proxy.full_log().splitlines()[mark:]), 5))
        mark = log_len()
        self.assertTrue(fs.wait_until(lambda: returns_in_force(mark), 20))
        new_in_force = returns_in_force(mark)
        pub.stop()
        fs.wait_drained(ledger, queue, 30, dlq_expected=len(ledger.confirmed))
        con.stop()
        account = ledger.account(*fs.final_count(NODE, queue))
        metrics = proxy.metrics()
        reloads = {k: v for k, v in metrics.items() if k.startswith("nackguard_policy_reloads")}
        self.record(fault="policy file corrupted during SIGHUP reloads", account=account,
                    corrupt_reloads_refused=failed_lines, returns_while_corrupt=old_kept,
                    returns_after_valid_reload=new_in_force, reload_metrics=reloads,
                    client_errors=[d for _, k, d in pub.events.events + con.events.events
                                   if k == "error"][:3])
        self.assert_no_loss(account, "reload stream")
        self.assertEqual(old_kept, [2], "the corrupt file changed the policy in force")
        self.assertEqual(new_in_force, [3], "the valid file did not take effect")
        self.assertEqual(pub.connects + con.connects, 2, "a client was disconnected")
        self.finish()


if __name__ == "__main__":
    unittest.main()
