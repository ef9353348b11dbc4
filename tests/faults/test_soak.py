"""Soak: long mixed traffic through nackguard with broker restarts and policy reloads.

Skipped unless NACKGUARD_SOAK=1 (so never part of a normal CI run). Uses this module's
PRIVATE RabbitMQ node, like every fault test.

  NACKGUARD_SOAK=1               run it
  NACKGUARD_SOAK_MINUTES         duration (30)
  NACKGUARD_SOAK_RESTART_S       broker restart every N s (300), alternating
                                 stop_app/start_app and kill -9 + restart
  NACKGUARD_SOAK_RELOAD_S        policy reload (SIGHUP) every N s (60); every third reload
                                 first writes a corrupt file (must be refused), the next one
                                 a valid file again; max_redeliveries alternates 3 and 4
  NACKGUARD_SOAK_SAMPLE_S        CSV sample every N s (10)

Traffic: two queues, one with `requeue: immediate`, one with `requeue: delayed` (backoff
1s..4s); per queue a pika publisher with confirms (50/s) and two pika consumers through the
proxy, acking, nacking each 7th message once and every 25th message always (poison).

Written to $NACKGUARD_BUILD_DIR/faults-soak.csv, one row per sample and per event: time,
event, the proxy's RSS and fds, published / confirmed / consumed, ready messages in the
queues, DLQs and delay queues, client connection errors, and the proxy's reload, fallback and
dead-letter counters. The run ends with the exact account per queue (lost must be 0), and
the proxy's fds back at their baseline.
"""

import csv
import os
import time
import unittest

import faults_support as fs

ENABLED = os.environ.get("NACKGUARD_SOAK", "") not in ("", "0")
MINUTES = float(os.environ.get("NACKGUARD_SOAK_MINUTES") or "30")
RESTART_S = float(os.environ.get("NACKGUARD_SOAK_RESTART_S") or "300")
RELOAD_S = float(os.environ.get("NACKGUARD_SOAK_RELOAD_S") or "60")
SAMPLE_S = float(os.environ.get("NACKGUARD_SOAK_SAMPLE_S") or "10")
NODE = None


def setUpModule():
    global NODE
    if not ENABLED:
        raise unittest.SkipTest("soak test: set NACKGUARD_SOAK=1 to run it")
    NODE = fs.start_module_node()


def tearDownModule():
    if ENABLED:
        fs.stop_module_node()


class SoakTest(fs.FaultTest):
    watchdog_timeout = MINUTES * 60 + 900

    def test_soak(self):
        duration = MINUTES * 60
        queues = {"immediate": self.queue("soakimm"), "delayed": self.queue("soakdel")}

        def policies(max_redeliveries):
            return {
                "imm.yaml": fs.policy_yaml(queues["immediate"], max_redeliveries,
                                           rate=fs.NO_RATE_LIMITS),
                "del.yaml": fs.policy_yaml(queues["delayed"], max_redeliveries,
                                           requeue="delayed",
                                           backoff={"initial": "1s", "multiplier": 2,
                                                    "max": "4s", "jitter": "none"},
                                           rate=fs.NO_RATE_LIMITS),
            }

        proxy = self.start_proxy(name="soak", policies=policies(3), handshake="5s")
        fd_idle = fs.settled_fd_count(proxy.pid)  # no client connected yet
        ledgers, clients = {}, []
        for kind, queue in queues.items():
            ledger = fs.Ledger(kind)
            ledgers[kind] = ledger
            pub = fs.Publisher(proxy.port, queue, ledger, f"s{kind[:3]}", rate=50,
                               name=f"pub-{kind}")
            cons = [fs.Consumer(proxy.port, queue, ledger, prefetch=20, name=f"con-{kind}-{i}")
                    for i in range(2)]
            clients += [pub] + cons
        for c in clients:
            self.addCleanup(c.stop, 5)
            c.start()

        csv_path = os.path.join(fs.BUILD_DIR, "faults-soak.csv")
        fields = ["elapsed_s", "event", "proxy_rss_kb", "proxy_fds", "published", "confirmed",
                  "consumed", "ready_queues", "ready_dlqs", "ready_delay_queues",
                  "client_errors", "reloads_ok", "reloads_error", "fallbacks",
                  "dead_letters"]
        out = open(csv_path, "w", newline="")
        self.addCleanup(out.close)
        writer = csv.DictWriter(out, fieldnames=fields)
        writer.writeheader()
        t0 = time.monotonic()
        fd_base = None
        rss_samples = []

        def count(name):
            try:
                return fs.message_count(name) or 0
            except Exception:
                return -1

        def sample(event=""):
            metrics = proxy.metrics()
            rss = proxy.rss_kb()
            rss_samples.append(rss)
            delay_ready = 0
            if not event.startswith("broker"):
                try:
                    for kind, q in queues.items():
                        for name, (ready, _) in NODE.queues(f"nackguard.delay.{q}.").items():
                            delay_ready += ready
                except Exception:
                    delay_ready = -1
            row = {
                "elapsed_s": round(time.monotonic() - t0, 1), "event": event,
                "proxy_rss_kb": rss, "proxy_fds": proxy.fds(),
                "published": sum(len(l.published) for l in ledgers.values()),
                "confirmed": sum(len(l.confirmed) for l in ledgers.values()),
                "consumed": sum(len(l.consumed) for l in ledgers.values()),
                "ready_queues": sum(count(q) for q in queues.values()),
                "ready_dlqs": sum(count(f"{q}.dlq") for q in queues.values()),
                "ready_delay_queues": delay_ready,
                "client_errors": sum(len([e for e in c.events.events if e[1] == "error"])
                                     for c in clients),
                "reloads_ok": sum(v for k, v in metrics.items()
                                  if k.startswith("nackguard_policy_reloads_total")
                                  and "ok" in k),
                "reloads_error": sum(v for k, v in metrics.items()
                                     if k.startswith("nackguard_policy_reloads_total")
                                     and "error" in k),
                "fallbacks": sum(v for k, v in metrics.items()
                                 if k.startswith("nackguard_fallbacks_total")),
                "dead_letters": sum(v for k, v in metrics.items()
                                    if k.startswith("nackguard_dead_letters_total")),
            }
            writer.writerow(row)
            out.flush()
            fs.log(f"soak {row}")
            return row

        time.sleep(5)
        fd_base = proxy.fds()
        sample("start")
        next_sample = time.monotonic() + SAMPLE_S
        next_restart = time.monotonic() + RESTART_S
        next_reload = time.monotonic() + RELOAD_S
        restarts = reloads = 0
        max_redeliveries = 3
        end = t0 + duration
        while time.monotonic() < end:
            now = time.monotonic()
            if now >= next_restart:
                restarts += 1
                if restarts % 2:
                    sample("broker stop_app")
                    NODE.stop_app()
                    time.sleep(5)
                    NODE.start_app()
                    sample("broker start_app")
                else:
                    sample("broker kill -9")
                    NODE.kill9()
                    time.sleep(2)
                    NODE.start(fresh=False)
                    sample("broker restarted")
                next_restart = time.monotonic() + RESTART_S
            if now >= next_reload:
                reloads += 1
                if reloads % 3 == 0:
                    proxy.write_policy("imm.yaml", "queue: [corrupt\n")
                    proxy.sighup()
                    time.sleep(1)
                    sample("reload (corrupt file)")
                    max_redeliveries = 3 if max_redeliveries == 4 else 4
                for name, text in policies(max_redeliveries).items():
                    proxy.write_policy(name, text)
                proxy.sighup()
                sample(f"reload (max_redeliveries {max_redeliveries})")
                next_reload = time.monotonic() + RELOAD_S
            if now >= next_sample:
                sample()
                next_sample = time.monotonic() + SAMPLE_S
            time.sleep(0.5)

        for c in clients:
            if isinstance(c, fs.Publisher):
                self.assertTrue(c.stop(), f"{c.name} is stuck")
        accounts = {}
        for kind, queue in queues.items():
            ledger = ledgers[kind]
            poison = sum(1 for i in ledger.confirmed if fs.number_of(i) % 25 == 0)
            fs.wait_drained(ledger, queue, 120, dlq_expected=poison)
        for c in clients:
            self.assertTrue(c.stop(), f"{c.name} is stuck")
        fs.wait_until(lambda: proxy.fds() == fd_idle, 10, 0.1)  # a probe socket may linger
        fd_end = proxy.fds()
        sample("end")
        for kind, queue in queues.items():
            accounts[kind] = ledgers[kind].account(*fs.final_count(NODE, queue))
            fs.log(f"soak {kind}: {fs.Ledger.summary(accounts[kind])}")
        self.record(fault=f"soak {MINUTES:g} min: mixed traffic, poison, broker restart every "
                          f"{RESTART_S:g}s, reload every {RELOAD_S:g}s",
                    accounts=accounts, restarts=restarts, reloads=reloads,
                    rss_kb_max=max(rss_samples), rss_kb_end=rss_samples[-1],
                    fd_idle=fd_idle, fd_with_clients=fd_base, fd_end=fd_end, csv=csv_path)
        for kind, account in accounts.items():
            self.assert_no_loss(account, f"soak {kind}")
        self.assertEqual(fd_end, fd_idle, f"proxy fds: {fd_idle} before any client, {fd_end} "
                                          "after all of them closed")
        self.assertLess(max(rss_samples), 200 * 1024, f"RSS peaked at {max(rss_samples)} KiB")


if __name__ == "__main__":
    unittest.main()
