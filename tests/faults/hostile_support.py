"""The hostile-input tests' harness (test_hostile_input.py): raw connections and what came
back on them (outcome: connection.close, EOF, seconds), cases run at once against the broker
directly and through the proxy, and HostileCase, the test base: one proxy shared by the
class, and a bystander stream through it that must not notice anything."""

import socket
import threading
import time

import faults_support as fs
import rawamqp as raw

# Each case must end in connection.close then EOF, or EOF, within this many seconds.
EOF_WITHIN = 5.0


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


class HostileCase(fs.FaultTest):
    """One proxy for the whole class (handshake timeout 2 s, every faults.* queue under
    max_redeliveries 3), and per test a bystander stream through it, the proxy's RSS before
    and a sampler of it during the test."""

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
        self.bystander = fs.Bystander(self.proxy.port, self.by_queue, self.by_ledger, "hb",
                                      rate=40, name="bystander")
        self.addCleanup(self.bystander.stop, 5)
        self.bystander.start()
        fs.wait_until(lambda: self.bystander.pub.connects and self.bystander.con.connects, 10)
        self.rss_before = self.proxy.rss_kb()
        self.sampler = fs.Sampler(self.proxy.pid, 0.05)
        self.sampler.start()
        self.addCleanup(self.sampler.stop)

    def finish(self):
        """The bystander was never disconnected and lost nothing; the proxy is alive."""
        self.assertTrue(self.proxy.alive(), f"the proxy exited: {self.proxy.process.returncode}")
        self.sampler.stop()
        fs.wait_until(lambda: len(self.by_ledger.confirmed) > 20, 10)
        self.bystander.drain(30)
        pub, con = self.bystander.pub, self.bystander.con
        errors = [d for _, k, d in pub.events.events + con.events.events if k == "error"]
        account = self.by_ledger.account(*fs.final_count(self.node, self.by_queue))
        self.record(bystander=account, bystander_errors=errors[:3],
                    rss_kb_before=self.rss_before, rss_kb_peak=self.sampler.max_rss_kb())
        self.assertEqual(errors, [], "the bystander's connections were disturbed")
        self.assertEqual((pub.connects, con.connects), (1, 1))
        self.assert_no_loss(account, "bystander")

    def assert_clean(self, o, what, codes=None):
        self.assertIsNone(o.get("error"), f"{what}: {o}")
        self.assertTrue(o["eof"], f"{what}: no EOF within {EOF_WITHIN}s: {o}")
        self.assertLess(o["seconds"], EOF_WITHIN + 0.5, f"{what}: {o}")
        if codes is not None:
            self.assertIsNotNone(o["close"], f"{what}: EOF without connection.close: {o}")
            self.assertIn(o["close"][0], codes, f"{what}: {o}")

    def both(self, make, concurrent=True):
        """Runs a case against the broker directly and through the proxy; at the same time
        unless told otherwise (the broker's answer is only recorded, and is often a silence
        of several seconds)."""
        if not concurrent:
            return {"broker": make(fs.BROKER_PORT), "proxy": make(self.proxy.port)}
        return self.each_both({None: make})[None]

    def each_both(self, cases):
        """Runs every case of {name: make(port)} against the broker and through the proxy,
        all at once, each on its own connection; {name: {"broker": ..., "proxy": ...}}."""
        calls = {(name, side): (make, port) for name, make in cases.items()
                 for side, port in (("broker", fs.BROKER_PORT), ("proxy", self.proxy.port))}
        return {name: {side: r for (n, side), r in run_all(calls).items() if n == name}
                for name in cases}

    def assert_each_clean(self, runs, proxy_alive=False):
        """assert_clean on the proxy's side of each of `runs` (each_both's answer), in a
        subTest per case, and with proxy_alive that the proxy is still running after it;
        {case: {side: short outcome}} for the record."""
        results = {}
        for name, r in runs.items():
            results[name] = {k: short(v) for k, v in r.items()}
            with self.subTest(case=name):
                self.assert_clean(r["proxy"], name)
                if proxy_alive:
                    self.assertTrue(self.proxy.alive(), f"{name}: the proxy died")
        return results
