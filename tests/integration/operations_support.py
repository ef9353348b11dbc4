"""Helpers for the operations tests (test_operations.py: metrics and health endpoints;
test_operations_lifecycle.py: reload, drain, logs).

What is here (on top of harness.py and redelivery_support.py, which it uses and does not
change):
  parse_metrics(), MetricsPage, http_get(), raw_http()  from metrics_page.py, re-exported
  POISON, GOODS      the labels (bodies) of the poison and the 99 good messages
  EXPECTED_TYPES     every metric nackguard exports, with its TYPE
  immediate_policy() the text of a `requeue: immediate` policy without rate limits
  OpsProxy           a nackguard process (a redelivery_support.GuardProxy) with any config
                     keys set, stdout and stderr kept apart (log_path is stderr), and helpers:
                     metrics(), wait_metric(), readyz(), signal(), write_policy(), ...
  OpsTest            unittest base class (a redelivery_support.RedeliveryTest): per-test
                     OpsProxy processes, queue names deleted afterwards, a direct broker
                     connection; publish_mix(), dlq_count(), assert_well_formed() (a
                     metrics page), assert_counters_monotone() (across pages)
  proxy_version()    the version `$NACKGUARD_BIN --version` prints
  SlowClients        TCP clients that each get one byte of a request a second, from one
                     thread; wait_round(n) waits until each has been sent n bytes
"""

import http.client
import json
import os
import re
import socket
import subprocess
import threading
import uuid

import harness
import waiting
import redelivery_support as rs
from redelivery_support import NO_RATE_LIMITS, props

from metrics_page import (  # noqa: F401  (re-exported: the tests say ops.X)
    MetricsFormatError, MetricsPage, check_histogram, http_get, parse_metrics, raw_http)

POISON = "poison"
GOODS = [f"good-{i:02d}" for i in range(99)]

# Every metric nackguard exports (proxy/metrics/metric_list.hpp) and its TYPE.
EXPECTED_TYPES = {
    "nackguard_build_info": "gauge",
    "nackguard_client_connections": "gauge",
    "nackguard_upstream_connections": "gauge",
    "nackguard_upstream_connect_failures_total": "counter",
    "nackguard_upstream_unavailable_total": "counter",
    "nackguard_accept_failures_total": "counter",
    "nackguard_frames_total": "counter",
    "nackguard_bytes_total": "counter",
    "nackguard_deliveries_total": "counter",
    "nackguard_returns_total": "counter",
    "nackguard_requeues_total": "counter",
    "nackguard_dead_letters_total": "counter",
    "nackguard_fallbacks_total": "counter",
    "nackguard_ack_timeouts_total": "counter",
    "nackguard_outage": "gauge",
    "nackguard_outage_messages": "gauge",
    "nackguard_outage_messages_dropped_total": "counter",
    "nackguard_outage_max_reached_total": "counter",
    "nackguard_tracker_entries": "gauge",
    "nackguard_tracker_evictions_total": "counter",
    "nackguard_tracker_expiries_total": "counter",
    "nackguard_queue_facts": "gauge",
    "nackguard_queue_facts_forgotten_total": "counter",
    "nackguard_management_lookups_total": "counter",
    "nackguard_management_limits_known": "gauge",
    "nackguard_management_limits_forgotten_total": "counter",
    "nackguard_retained_body_bytes": "gauge",
    "nackguard_retained_body_bytes_limit": "gauge",
    "nackguard_retained_body_refusals_total": "counter",
    "nackguard_untracked_deliveries_total": "counter",
    "nackguard_policy_reloads_total": "counter",
    "nackguard_returns_before_dead_letter": "histogram",
}


def immediate_policy(queue, max_redeliveries=5):
    return rs.policy_yaml(queue, max_redeliveries=max_redeliveries, requeue="immediate",
                          rate=NO_RATE_LIMITS)


def proxy_version():
    """The version `$NACKGUARD_BIN --version` prints ("nackguard X" -> "X")."""
    out = subprocess.run([harness.PROXY_BIN, "--version"], capture_output=True, text=True,
                         timeout=10, check=True).stdout.strip()
    m = re.fullmatch(r"nackguard (\S+)", out)
    if not m:
        raise AssertionError(f"unexpected --version output: {out!r}")
    return m.group(1)


def _yaml_value(value):
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_yaml_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)



def add_user(name, password, configure=".*"):
    """Creates (or resets) a broker user with permissions configure/.*/.* on "/"."""
    try:
        harness.rabbitmqctl("add_user", name, password)
    except AssertionError as exc:
        if "already exists" not in str(exc):
            raise
        harness.rabbitmqctl("change_password", name, password)
    harness.rabbitmqctl("set_permissions", "-p", "/", name, configure, ".*", ".*")


class OpsProxy(rs.GuardProxy):
    """A nackguard process with the given policy files and config keys.

    `config` maps top-level keys to values (dicts for sections: {"shutdown": {"grace":
    "2s"}}); they replace the defaults written here (listen, upstream, threads,
    policies_dir, metrics, log), a section replaced as a whole except metrics, listen and
    log, which are merged. stdout goes to `stdout_path`, stderr to `log_path`.
    """

    def __init__(self, policies, name="ops-proxy", upstream_port=harness.BROKER_PORT,
                 upstream_host=harness.BROKER_HOST, config=None):
        super().__init__(policies, name=name, upstream_port=upstream_port,
                         upstream_host=upstream_host)
        self.config = dict(config or {})

    def config_text(self):
        sections = {
            "listen": {"address": "127.0.0.1", "port": self.port},
            "upstream": {"host": self.upstream_host, "port": self.upstream_port},
            "threads": 2,
            "policies_dir": self.policies_dir,
            "metrics": {"address": "127.0.0.1", "port": self.metrics_port},
            "log": {"level": harness.PROXY_LOG_LEVEL, "format": "text"},
        }
        for key, value in self.config.items():
            if key in ("listen", "metrics", "log") and isinstance(value, dict):
                sections[key] = {**sections[key], **value}
            else:
                sections[key] = value
        return ("# Generated by tests/integration/operations_support.py\n" +
                "".join(f"{key}: {_yaml_value(value)}\n" for key, value in sections.items()))

    SEPARATE_STDOUT = True
    # Ready once /healthz answers: both ports are bound by then (the AMQP port before the
    # metrics port), and no TCP connection is made to the AMQP port, which would count as a
    # client connection (and, with the broker down, as an upstream connect failure).
    READY = "answering /healthz"

    def wait_started(self, timeout):
        def attempt():  # True: /healthz answers 200; False: the process is gone; None: not yet
            if not self.alive():
                return False
            try:
                if http_get(self.metrics_port, "/healthz", timeout=1.0)[0] == 200:
                    return True
            except (OSError, http.client.HTTPException):
                pass
            return None

        return waiting.poll(attempt, lambda outcome: outcome is not None, timeout) is True

    def stdout_text(self):
        if not self.stdout_path or not os.path.exists(self.stdout_path):
            return ""
        with open(self.stdout_path, "rb") as f:
            return f.read().decode(errors="replace")

    def full_log_bytes(self):
        if not self.log_path or not os.path.exists(self.log_path):
            return b""
        with open(self.log_path, "rb") as f:
            return f.read()

    # -- signals and exit

    def signal(self, sig):
        self.process.send_signal(sig)

    def wait_exit(self, timeout):
        """The exit code, or None if the process still runs after `timeout` seconds."""
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def wait_log(self, needle, count=1, timeout=5.0):
        """Waits until `needle` is in at least `count` log lines; returns those lines."""
        return waiting.poll(lambda: self.log_lines(needle), lambda lines: len(lines) >= count,
                            timeout)

    def wait_ready(self, want_status, timeout):
        """Polls /readyz until it answers `want_status`; returns the last (status, body)."""
        status, _, body = waiting.poll(lambda: self.get("/readyz"),
                                       lambda answer: answer[0] == want_status, timeout, 0.1)
        return status, body


class SlowClients:
    """`count` TCP connections to 127.0.0.1:`port`, each sent one byte of `request` a second
    by one thread. `rounds` counts the rounds of one byte to every client so far, and
    wait_round() waits for one: a test acts while they trickle without sleeping for it."""

    def __init__(self, port, request, count):
        self.sockets = []
        for _ in range(count):
            s = socket.create_connection(("127.0.0.1", port), timeout=2)
            self.sockets.append(s)
        self.request = request
        self.rounds = 0
        self._round_done = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._trickle, daemon=True)
        self._thread.start()

    def _trickle(self):
        i = 0
        while not self._stop.is_set() and i < len(self.request):
            for s in self.sockets:
                try:
                    s.send(self.request[i:i + 1])
                except OSError:
                    pass
            i += 1
            with self._round_done:
                self.rounds = i
                self._round_done.notify_all()
            self._stop.wait(1.0)

    def wait_round(self, n, timeout=5.0):
        """Whether every client has been sent `n` bytes within `timeout` seconds."""
        with self._round_done:
            return self._round_done.wait_for(lambda: self.rounds >= n, timeout)

    def close(self):
        self._stop.set()
        self._thread.join(5)
        for s in self.sockets:
            s.close()


def log_json_lines(text):
    """Each non-empty line parsed as JSON; raises AssertionError naming the first line that
    is not a JSON object."""
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        try:
            value = json.loads(line)
        except ValueError as exc:
            raise AssertionError(f"log line {number} is not JSON ({exc}): {line!r}") from None
        if not isinstance(value, dict):
            raise AssertionError(f"log line {number} is not a JSON object: {line!r}")
        out.append(value)
    return out


# ---------------------------------------------------------------- test base

class OpsTest(rs.RedeliveryTest):
    """Each test starts its own OpsProxy processes; queues from queue_name() are deleted
    afterwards (with their .dlq and the given delay queues)."""

    def queue_name(self, tag, delay_ttls_ms=()):
        name = f"nackguard-it.ops-{tag}.{os.urandom(5).hex()}"
        self.cleanup_queues(name, f"{name}.dlq",
                            *(f"nackguard.delay.{name}.{ttl}ms" for ttl in delay_ttls_ms))
        return name

    def publish_mix(self, queue, poison_props=None):
        """99 good messages and the poison at index 37; body = label."""
        messages = [(label.encode(), props(message_id=f"mid-{label}")) for label in GOODS]
        messages.insert(37, (POISON.encode(),
                             poison_props or props(message_id="poison-" + uuid.uuid4().hex)))
        self.broker.publish(queue, messages)

    def dlq_count(self, queue):
        return self.broker.message_count(f"{queue}.dlq") or 0

    def assert_counters_monotone(self, pages):
        for n, (earlier, later) in enumerate(zip(pages, pages[1:])):
            now = later.counters()
            for key, value in earlier.counters().items():
                self.assertIn(key, now, f"series {key} vanished between scrapes {n} and {n + 1}")
                self.assertGreaterEqual(now[key], value,
                                        f"counter {key} went down between scrapes {n} and "
                                        f"{n + 1}")

    def assert_well_formed(self, page):
        """Every metric on the page has HELP and TYPE, every documented metric is there with
        its type, and the histogram's invariants hold."""
        self.assertEqual(page.content_type, "text/plain; version=0.0.4; charset=utf-8")
        for name, family in page.families.items():
            self.assertIsNotNone(family.help, f"{name} has no HELP line")
            self.assertTrue(family.help.strip(), f"{name} has an empty HELP text")
            self.assertIsNotNone(family.type, f"{name} has no TYPE line")
            self.assertTrue(name.startswith("nackguard_"), f"metric {name} lacks the prefix")
        types = {n: f.type for n, f in page.families.items()}
        self.assertEqual({n: types.get(n) for n in EXPECTED_TYPES}, EXPECTED_TYPES,
                         "a metric is missing or has another TYPE")
        check_histogram(page, "nackguard_returns_before_dead_letter")

    def start_ops(self, policies=None, config=None, name=None, upstream_port=None):
        proxy = OpsProxy(policies or {}, name=name or f"{self._testMethodName}-proxy",
                         upstream_port=upstream_port or harness.BROKER_PORT, config=config)
        self._test_proxies.append(proxy)
        self.addCleanup(proxy.cleanup)
        proxy.start()
        return proxy
