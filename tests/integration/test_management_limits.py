# ctest-variants: rmq43
"""Delivery limits learnt from RabbitMQ's management API (upstream.management): a limit set by
a RabbitMQ policy, invisible on the wire, shows on /status.json with its source, and a change
of the policy shows after the refresh; a wrong password shows as failed in /status.json, in
nackguard_management_lookups_total and in one log line; a 404 is "not_found" and asked again
after the refresh, and https checks the API's certificate against ca_file (against a stub of
the API that records what it was asked).

Its own node of the variant's version with the rabbitmq_management plugin on 127.0.0.1:
3.10's nackguard-mgmt@localhost, AMQP 31272, distribution 31273 (the CLI tools use the 10
ports above), epmd 31269, management 31290; 4.3's nackguard-mgmt43@localhost on 31472, 31473,
31469 and 31490. The node's statistics come every second (collect_statistics_interval,
quorum_tick_interval), not every 5 s: 3.x shows a queue's policies from them.

The guard asks the API for a queue's limit at the queue's first delivery on a connection, then
at most once per `refresh` (1 s here) on that connection, and at the returns and redeliveries
that need the limit (session/limit_watch.cpp). So each wait here delivers a message
(basic.get) on the test's one connection, then looks at /status.json: the next delivery a
refresh interval later asks again.
"""
import base64
import http.server
import json
import os
import shutil
import ssl
import subprocess
import sys
import threading
import time
import unittest
import uuid

import harness
from management_config import with_management
import private_node
import status_support
import tls_support
import waiting

VERSION = private_node.VERSION if private_node.VERSION == "4.3" else "3.10"
_SUFFIX, AMQP_PORT, DIST_PORT, EPMD_PORT, MGMT_PORT = {
    "3.10": ("", 31272, 31273, 31269, 31290),
    "4.3": ("43", 31472, 31473, 31469, 31490)}[VERSION]
NODE_DIR = os.path.join(harness.BUILD_DIR, "rabbitmq-management" + ("-4.3" if _SUFFIX else ""))
NODE_ENV = private_node.node_env(
    f"nackguard-mgmt{_SUFFIX}@localhost", AMQP_PORT, DIST_PORT, EPMD_PORT, version=VERSION,
    fresh=True,
    plugins="rabbitmq_management",
    conf_extra=f"management.tcp.port = {MGMT_PORT}\nmanagement.tcp.ip = 127.0.0.1\n"
               "collect_statistics_interval = 1000",
    advanced_config="[{rabbit, [{quorum_tick_interval, 1000}]}].")
NODE_LOCK = f"/tmp/nackguard-test-mgmt{_SUFFIX}-node.lock"
CTL = os.path.join(NODE_DIR, "rabbitmqctl")
MONITOR, MONITOR_PASSWORD = "nackguard-monitor", "monitor-" + uuid.uuid4().hex[:8]
WAIT = 45.0  # s for a limit to show: statistics, the refresh and a lookup each take ~1 s


def node(action, timeout=180):
    return private_node.node_script(action, NODE_DIR, NODE_ENV, timeout)


def ctl(*args):
    done = subprocess.run([CTL, *args], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise AssertionError(f"rabbitmqctl {' '.join(args)}: {done.stdout}{done.stderr}")
    return done.stdout


class ManagementProxy(harness.Proxy):
    """A proxy in front of the node whose upstream has a management section."""

    def __init__(self, name, url, password, refresh="1s", ca_file=None):
        super().__init__(AMQP_PORT, name=name)
        self.url, self.password, self.refresh, self.ca_file = url, password, refresh, ca_file

    def config_text(self):
        return with_management(self, super().config_text(), self.url, MONITOR, self.password,
                               self.refresh, self.ca_file)


def limit_row(doc, queue, vhost="/"):
    return next((row for row in doc.get("queue_limits", [])
                 if row["queue"] == queue and row["vhost"] == vhost), None)


class ManagementLimitsTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        os.makedirs(NODE_DIR, exist_ok=True)
        cls._lock = harness.lock_file(NODE_LOCK, "another run of test_management_limits holds "
                                      "its node")
        if node("status").returncode == 0:
            node("stop")  # left over from an interrupted run, perhaps with other settings
        started = node("start", 300 if VERSION == "3.10" else 420)
        if started.returncode != 0 or not harness.wait_for_port(MGMT_PORT, 60):
            node("stop")
            cls._lock.close()
            raise AssertionError(f"the management node did not start:\n{started.stdout}"
                                 f"{started.stderr}")
        # The monitoring tag lets the user into the API; a permission entry on the vhost,
        # even an empty one, lets it see the vhost's queues.
        ctl("add_user", MONITOR, MONITOR_PASSWORD)
        ctl("set_user_tags", MONITOR, "monitoring")
        ctl("set_permissions", "-p", "/", MONITOR, "", "", "")

    @classmethod
    def tearDownClass(cls):
        try:
            stopped = node("stop")
            if stopped.returncode != 0:
                print(f"warning: stopping {NODE_DIR}: {stopped.stderr}", file=sys.stderr)
        finally:
            cls._lock.close()

    def setUp(self):
        self.watchdog = harness.Watchdog(self.id(), timeout=240).start()
        self.addCleanup(self.watchdog.cancel)
        self.proxies = []

    def run(self, result=None):
        outcome, failed = harness.run_showing_logs(self, result, super().run,
                                                   lambda: self.proxies)
        if not failed:
            for proxy in self.proxies:
                proxy.remove_dir()
        return outcome

    def start_proxy(self, name, url, password, ca_file=None):
        proxy = ManagementProxy(name, url, password, ca_file=ca_file)
        self.proxies.append(proxy)
        self.addCleanup(proxy.stop)  # its directory and log stay until the test passed
        proxy.start()
        return proxy

    def quorum_queue(self, proxy):
        """A quorum queue declared through the proxy, and a channel on it; deleted afterwards."""
        queue = f"nackguard-it.mgmt.{uuid.uuid4().hex[:10]}"
        conn = harness.connect(proxy.port)
        self.addCleanup(harness.close_connection, conn)
        channel = conn.channel()
        channel.queue_declare(queue, durable=True, arguments={"x-queue-type": "quorum"})
        self.addCleanup(harness.delete_queue, queue, AMQP_PORT)
        return queue, channel

    def deliver_and_wait(self, proxy, channel, queue, condition, what):
        """Delivers a message through the proxy (the first delivery of the queue on the
        connection asks for its limit, and then one a refresh interval after the last ask),
        then looks at /status.json, until `condition(row)` holds; returns the row."""
        def deliver_and_look():
            channel.basic_publish("", queue, b"m")
            method = None
            while method is None:
                method, _, _ = channel.basic_get(queue)
            channel.basic_ack(method.delivery_tag)
            return limit_row(status_support.status_json(proxy), queue)

        row = waiting.poll(deliver_and_look, lambda row: row is not None and condition(row),
                           WAIT, 0.2)
        if row is None or not condition(row):
            self.fail(f"{what}: after {WAIT:.0f} s the queue's row is {row}")
        return row

    def test_a_policy_limit_shows_and_its_change_is_refreshed(self):
        proxy = self.start_proxy("mgmt-proxy", f"http://127.0.0.1:{MGMT_PORT}", MONITOR_PASSWORD)
        queue, channel = self.quorum_queue(proxy)
        policy = f"dl-{queue}"
        ctl("set_policy", "-p", "/", "--apply-to", "queues", policy, f"^{queue}$",
            '{"delivery-limit":5}')
        self.addCleanup(ctl, "clear_policy", "-p", "/", policy)
        row = self.deliver_and_wait(proxy, channel, queue, lambda r: r["limit"] == 5,
                                    "the policy's limit 5")
        self.assertEqual((row["state"], row["source"], row["type"], row["learnt_from"]),
                         ("known", "policy", "quorum", "management_api"), row)
        self.assertIsNone(row["error"], row)
        self.assertIsNotNone(row["learnt_at"], row)
        # The limit the API told is the one in force for the queue's messages (/status.json's
        # queue row), instead of the assumed one.
        queue_row = status_support.queue_row(status_support.status_json(proxy), queue)
        self.assertEqual(queue_row["delivery_limit"], {"limit": 5, "from": "management_api"},
                         queue_row)
        page = proxy.metrics()
        self.assertGreaterEqual(page.value("nackguard_management_lookups_total", result="ok"), 1)
        self.assertEqual(page.value("nackguard_management_lookups_total", result="failed"), 0)
        self.assertGreaterEqual(page.value("nackguard_management_limits_known"), 1)

        ctl("set_policy", "-p", "/", "--apply-to", "queues", policy, f"^{queue}$",
            '{"delivery-limit":7}')
        row = self.deliver_and_wait(proxy, channel, queue, lambda r: r["limit"] == 7,
                                    "the changed policy's limit 7")
        self.assertEqual((row["state"], row["source"]), ("known", "policy"), row)
        learnt = proxy.log_lines(f"delivery limit learnt: vhost=/ queue={queue} ")
        self.assertTrue(any("limit=7 (policy)" in line for line in learnt), learnt)
        self.assertEqual(proxy.log_lines("delivery limit lookup failed"), [])

    def test_a_wrong_password_shows_as_failed_once_in_the_log(self):
        proxy = self.start_proxy("mgmt-wrong-password", f"http://127.0.0.1:{MGMT_PORT}",
                                 "not-the-password")
        queue, channel = self.quorum_queue(proxy)
        row = self.deliver_and_wait(proxy, channel, queue, lambda r: r["state"] == "failed",
                                    "a failed lookup")
        self.assertIn("401", row["error"], row)
        self.assertIsNone(row["limit"], row)
        first = proxy.metrics().value("nackguard_management_lookups_total", result="failed")
        self.assertGreaterEqual(first, 1)
        # Failures go on (one lookup each retry interval, 1 s here): two more prove that, and
        # still one line.
        self.deliver_and_wait(
            proxy, channel, queue,
            lambda r: proxy.metrics().value("nackguard_management_lookups_total",
                                            result="failed") >= first + 2,
            "two more failed lookups")
        lines = proxy.log_lines(f"delivery limit lookup failed: vhost=/ queue={queue}:")
        self.assertEqual(len(lines), 1, proxy.log_text())
        for part in (f"127.0.0.1:{MGMT_PORT}", "answered 401", "upstream.management in ",
                     "nackguard.yaml:", "monitoring tag"):
            self.assertIn(part, lines[0])
        self.assertNotIn("not-the-password", proxy.full_log())
        self.assertEqual(proxy.metrics().value("nackguard_management_limits_known"), 0)

    def test_not_found_is_asked_again_after_the_refresh(self):
        stub = StubApi()
        self.addCleanup(stub.close)
        proxy = self.start_proxy("mgmt-stub", f"http://127.0.0.1:{stub.port}/prefix",
                                 MONITOR_PASSWORD)
        queue, channel = self.quorum_queue(proxy)
        target = f"/prefix/api/queues/%2F/{queue}"
        row = self.deliver_and_wait(proxy, channel, queue, lambda r: r["state"] == "not_found",
                                    "a 404")
        self.assertIsNone(row["limit"], row)
        self.assertIsNone(row["error"], row)
        self.deliver_and_wait(proxy, channel, queue, lambda r: stub.count(target) >= 2,
                              "the 404 asked again")
        times = stub.times(target)
        self.assertGreaterEqual(times[1] - times[0], 0.9, f"asked at {times}: refresh is 1 s")
        self.assertIn("/prefix/api/overview", stub.paths())
        self.assertEqual(stub.authorizations(), {"Basic " + stub.basic(MONITOR, MONITOR_PASSWORD)})
        page = proxy.metrics()
        self.assertGreaterEqual(page.value("nackguard_management_lookups_total",
                                           result="not_found"), 2)
        self.assertEqual(page.value("nackguard_management_lookups_total", result="failed"), 0)
        self.assertEqual(proxy.log_lines("delivery limit lookup failed"), [])

    def test_https_checks_the_certificate_against_ca_file(self):
        pki = tls_support.Pki(os.path.join(harness.tmp_root(), f"mgmt-pki-{uuid.uuid4().hex[:8]}"))
        self.addCleanup(shutil.rmtree, pki.dir, True)
        pki.make_ca("ca", "nackguard test CA")
        pki.make_ca("other-ca", "an unrelated CA")
        pki.make_leaf("server", "localhost")
        stub = StubApi(tls=(pki.path("server.pem"), pki.path("server.key")))
        self.addCleanup(stub.close)
        trusting = self.start_proxy("mgmt-https", f"https://localhost:{stub.port}",
                                    MONITOR_PASSWORD, ca_file=pki.path("ca.pem"))
        queue, channel = self.quorum_queue(trusting)
        self.deliver_and_wait(trusting, channel, queue, lambda r: r["state"] == "not_found",
                              "a 404 over https")
        distrusting = self.start_proxy("mgmt-https-other-ca", f"https://localhost:{stub.port}",
                                       MONITOR_PASSWORD, ca_file=pki.path("other-ca.pem"))
        other_queue, other_channel = self.quorum_queue(distrusting)
        row = self.deliver_and_wait(distrusting, other_channel, other_queue,
                                    lambda r: r["state"] == "failed", "a refused certificate")
        self.assertIn("certificate verify failed", row["error"], row)
        self.assertIn("upstream.management.ca_file", row["error"], row)


class StubApi:
    """An HTTP server on 127.0.0.1 (https with `tls`, a certificate and key) that plays the
    management API: /api/overview says 3.10.8, every queue is 404. It records each request's
    path, time and Authorization header."""

    def __init__(self, tls=None):
        self._lock = threading.Lock()
        self._requests = []  # (path, monotonic time, authorization)
        stub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                with stub._lock:
                    stub._requests.append((self.path, time.monotonic(),
                                           self.headers.get("Authorization")))
                if self.path.endswith("/api/overview"):
                    status, body = 200, {"rabbitmq_version": "3.10.8"}
                else:
                    status, body = 404, {"error": "Object Not Found", "reason": "Not Found"}
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls is not None:  # (certificate, key): https
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @staticmethod
    def basic(user, password):
        return base64.b64encode(f"{user}:{password}".encode()).decode()

    def times(self, path):
        with self._lock:
            return [t for p, t, _ in self._requests if p == path]

    def count(self, path):
        return len(self.times(path))

    def paths(self):
        with self._lock:
            return [p for p, _, _ in self._requests]

    def authorizations(self):
        with self._lock:
            return {a for _, _, a in self._requests}

    def close(self):
        self._server.shutdown()
        self._server.server_close()


if __name__ == "__main__":
    unittest.main()
