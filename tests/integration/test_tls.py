# ctest-variants: rmq43 rmq43.quorum
"""TLS on both sides of the proxy (docs/tls.md).

Proves that:
- a client can reach the proxy over TLS (pika trusting the test CA) while the proxy speaks
  plain AMQP to the broker: publish and consume work, bodies arrive byte-exact;
- the proxy can reach a broker over TLS (a second private RabbitMQ node with a TLS
  listener), with pika speaking plain AMQP or TLS to the proxy, its certificate verified
  against upstream.tls.ca_file and against server_name (or upstream.host, an IP address);
- with upstream.tls.cert_file/key_file the proxy presents a client certificate, so pika's
  SASL EXTERNAL passes through and the broker logs the user in by the certificate's CN;
- refusals are prompt and logged once, naming the peer and OpenSSL's reason: a broker
  certificate from an unknown CA, for another name, or expired; a plain broker port; a
  client that does not trust the proxy's certificate; a client without a certificate when
  require_client_cert is true; a plain client on the TLS port; a client that never starts
  its handshake (timeouts.handshake); a broker that never answers (upstream.connect_timeout);
  a TCP health check on the TLS port is not a warning;
- a missing key, a file that is not PEM, and a key that does not match its certificate stop
  the start (and --check-config) with exit code 1, naming the key and the path.
"""

import collections
import os
import re
import shutil
import socket
import ssl
import subprocess
import time
import unittest
import uuid

import pika
import pika.credentials
import pika.exceptions

import harness
import tls_support
from tls_support import TlsProxy

PKI = None
REFUSED_WITHIN = 5.0   # seconds from connect to the client's failure
CONNECT_ERRORS = (pika.exceptions.AMQPError, OSError, ssl.SSLError)


def setUpModule():
    global PKI
    directory = os.path.join(tls_support.node_dir(), "certs")
    shutil.rmtree(directory, ignore_errors=True)
    PKI = tls_support.Pki(directory).make_all()


def round_trip(test, port, count=50, **connect_args):
    """Publishes `count` messages (one of 1 MiB) on a fresh queue and consumes them all."""
    bodies = [uuid.uuid4().bytes * (i + 1) for i in range(count - 1)] + [os.urandom(1 << 20)]
    with harness.unique_queue("tls") as queue:
        conn = harness.connect(port, **connect_args)
        try:
            channel = conn.channel()
            harness.declare_queue(channel, queue)
            channel.confirm_delivery()
            for body in bodies:
                channel.basic_publish("", queue, body)
            received = []
            for _method, _props, body in channel.consume(queue, auto_ack=True,
                                                         inactivity_timeout=10):
                if body is None:
                    break
                received.append(body)
                if len(received) == len(bodies):
                    break
            channel.cancel()
        finally:
            harness.close_connection(conn)
    test.assertEqual(len(received), len(bodies), "messages lost through the TLS proxy")
    test.assertTrue(received == bodies, "bodies differ after the round trip")


class TlsTest(unittest.TestCase):
    """Each test starts its own proxies; their logs are printed when a test fails."""

    maxDiff = 4000

    def setUp(self):
        super().setUp()
        harness.check_broker()
        self._proxies = []
        watchdog = harness.Watchdog(self.id()).start()
        self.addCleanup(watchdog.cancel)

    def run(self, result=None):
        outcome, _ = harness.run_showing_logs(self, result, super().run,
                                              lambda: getattr(self, "_proxies", []))
        for proxy in getattr(self, "_proxies", []):
            proxy.cleanup()
        return outcome

    def proxy(self, upstream_port, listen_tls=None, upstream_tls=None, extra=""):
        proxy = TlsProxy(upstream_port, listen_tls=listen_tls, upstream_tls=upstream_tls,
                         name=f"{self._testMethodName}-proxy", extra=extra)
        self._proxies.append(proxy)
        self.addCleanup(proxy.stop)  # the directory goes in run(), once the log was shown
        return proxy.start()

    def assertRefused(self, port, **connect_args):
        """Connecting fails, and promptly."""
        started = time.monotonic()
        with self.assertRaises(CONNECT_ERRORS):
            conn = harness.connect(port, **connect_args)
            harness.close_connection(conn)
        elapsed = time.monotonic() - started
        self.assertLess(elapsed, REFUSED_WITHIN, f"the refusal took {elapsed:.1f} s")

    def assertLoggedOnce(self, proxy, needle, *also):
        """A log line contains `needle` and every one of `also`, and no connection logged
        `needle` twice. (The proxy's readiness probe is a connection too: through a plain
        listener it also makes the proxy try the broker.)"""
        line = proxy.wait_for_log(needle)
        self.assertIsNotNone(line, f"no log line with {needle!r}")
        for part in also:
            self.assertIn(part, line)
        by_connection = collections.Counter(
            re.search(r"conn (\d+):", l).group(1) for l in proxy.full_log().splitlines()
            if needle in l)
        repeated = {conn: n for conn, n in by_connection.items() if n > 1}
        self.assertEqual(repeated, {}, f"connections that logged {needle!r} more than once")
        return line


def listen_tls(**overrides):
    settings = {"cert_file": PKI.path("server.pem"), "key_file": PKI.path("server.key")}
    settings.update(overrides)
    return settings


# ---------------------------------------------------------------- client -> proxy over TLS

class ClientSideTls(TlsTest):

    def test_publish_and_consume_over_tls(self):
        proxy = self.proxy(harness.BROKER_PORT, listen_tls=listen_tls())
        round_trip(self, proxy.port, ssl_options=tls_support.client_ssl_options(PKI))
        self.assertIn("clients must connect with TLS", proxy.full_log())

    def test_client_that_does_not_trust_the_proxy_fails_the_handshake(self):
        proxy = self.proxy(harness.BROKER_PORT, listen_tls=listen_tls())
        self.assertRefused(proxy.port,
                           ssl_options=tls_support.client_ssl_options(PKI, "other-ca.pem"))
        self.assertLoggedOnce(proxy, "TLS handshake with client 127.0.0.1:", "unknown ca",
                              "the client refused the proxy's certificate")

    def test_plain_client_on_the_tls_port_is_refused(self):
        proxy = self.proxy(harness.BROKER_PORT, listen_tls=listen_tls())
        self.assertRefused(proxy.port)
        self.assertLoggedOnce(proxy, "TLS handshake with client 127.0.0.1:",
                              "does not seem to speak TLS")

    def test_required_client_certificate(self):
        proxy = self.proxy(harness.BROKER_PORT, listen_tls=listen_tls(
            ca_file=PKI.path("ca.pem"), require_client_cert=True))
        self.assertRefused(proxy.port, ssl_options=tls_support.client_ssl_options(PKI))
        self.assertLoggedOnce(proxy, "TLS handshake with client 127.0.0.1:",
                              "peer did not return a certificate", "require_client_cert")
        round_trip(self, proxy.port, count=5,
                   ssl_options=tls_support.client_ssl_options(PKI, cert="client"))

    def test_handshake_timeout_covers_the_tls_handshake(self):
        proxy = self.proxy(harness.BROKER_PORT, listen_tls=listen_tls(),
                           extra="timeouts: {handshake: 1s}\n")
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as silent:
            started = time.monotonic()
            self.assertEqual(silent.recv(1), b"", "the proxy should close the silent client")
            elapsed = time.monotonic() - started
        self.assertLess(elapsed, 3.0)
        self.assertLoggedOnce(proxy, "did not complete within 1000 ms (timeouts.handshake)")

    def test_health_check_without_handshake_is_not_a_warning(self):
        proxy = self.proxy(harness.BROKER_PORT, listen_tls=listen_tls())
        for _ in range(3):
            socket.create_connection(("127.0.0.1", proxy.port), timeout=5).close()
        round_trip(self, proxy.port, count=2, ssl_options=tls_support.client_ssl_options(PKI))
        self.assertNotIn("TLS handshake with client", proxy.full_log())


# ---------------------------------------------------------------- proxy -> broker over TLS

def upstream_tls(**overrides):
    settings = {"ca_file": PKI.path("ca.pem")}
    settings.update(overrides)
    return settings


class BrokerSideTls(tls_support.WithTlsBroker, TlsTest):

    @classmethod
    def broker_pki(cls):
        return PKI

    def tls_port_proxy(self, **kwargs):
        return self.proxy(tls_support.TLS_NODE_TLS_PORT, **kwargs)

    def broker_connections(self):
        out = self.broker.ctl_run("list_connections", "-q", "user", "auth_mechanism", "ssl",
                                  "peer_cert_subject")
        return [line.split("\t") for line in out.splitlines() if line.strip()]

    def test_plain_client_to_tls_broker(self):
        # server_name left out: upstream.host 127.0.0.1 is checked against the IP SAN.
        proxy = self.tls_port_proxy(upstream_tls=upstream_tls())
        round_trip(self, proxy.port)
        self.assertIn("connecting to the broker with TLS (its certificate verified for "
                      "127.0.0.1", proxy.full_log())

    def test_tls_on_both_sides(self):
        proxy = self.tls_port_proxy(listen_tls=listen_tls(),
                                    upstream_tls=upstream_tls(server_name="localhost"))
        round_trip(self, proxy.port, ssl_options=tls_support.client_ssl_options(PKI))

    def test_sasl_external_with_the_proxys_client_certificate(self):
        proxy = self.tls_port_proxy(upstream_tls=upstream_tls(
            cert_file=PKI.path("client.pem"), key_file=PKI.path("client.key")))
        name = f"nackguard-it-external-{uuid.uuid4().hex[:8]}"
        conn = harness.connect(proxy.port, credentials=pika.credentials.ExternalCredentials(),
                               client_properties={"connection_name": name})
        try:
            channel = conn.channel()
            declared = channel.queue_declare("", exclusive=True).method.queue
            channel.basic_publish("", declared, b"external")
            _method, _props, body = channel.basic_get(declared, auto_ack=True)
            self.assertEqual(body, b"external")
            rows = self.broker_connections()
            self.assertIn([tls_support.CLIENT_CN, "EXTERNAL", "true",
                           f"CN={tls_support.CLIENT_CN}"], rows)
        finally:
            harness.close_connection(conn)
        # PLAIN still works through the same proxy: the client's choice is forwarded.
        round_trip(self, proxy.port, count=2)

    def test_unknown_ca_is_refused_and_logged(self):
        proxy = self.tls_port_proxy(upstream_tls=upstream_tls(ca_file=PKI.path("other-ca.pem")))
        self.assertRefused(proxy.port)
        line = self.assertLoggedOnce(proxy, "TLS handshake with upstream 127.0.0.1:24671 failed",
                                     "certificate verify failed", "upstream.tls.ca_file")
        # RabbitMQ sends its CA with its certificate, so OpenSSL names that CA: untrusted.
        self.assertRegex(line, "self-signed certificate in certificate chain|unable to get "
                               "local issuer certificate")

    def test_name_mismatch_is_refused_and_logged(self):
        proxy = self.tls_port_proxy(upstream_tls=upstream_tls(server_name="rabbit.example"))
        self.assertRefused(proxy.port)
        self.assertLoggedOnce(proxy, "TLS handshake with upstream 127.0.0.1:24671 failed",
                              "hostname mismatch", "upstream.tls.server_name")

    def test_verify_false_accepts_an_unknown_ca(self):
        proxy = self.tls_port_proxy(upstream_tls=upstream_tls(
            ca_file=PKI.path("other-ca.pem"), verify=False))
        round_trip(self, proxy.port, count=2)

    def test_tls_towards_a_plain_port_is_refused(self):
        proxy = self.proxy(tls_support.TLS_NODE_AMQP_PORT, upstream_tls=upstream_tls())
        self.assertRefused(proxy.port)
        self.assertLoggedOnce(proxy, "TLS handshake with upstream 127.0.0.1:24672 failed",
                              "does not seem to speak TLS")


class BrokerSideFailures(TlsTest):
    """Stand-ins for a broker that the proxy must give up on during the TLS handshake,
    before any AMQP byte: one presenting an expired certificate signed by the trusted CA, and
    one that accepts the TCP connection but never answers."""

    def test_expired_certificate_is_refused_and_logged(self):
        server = tls_support.TlsServer(PKI.path("expired.pem"), PKI.path("expired.key"))
        self.addCleanup(server.close)
        proxy = self.proxy(server.port, upstream_tls=upstream_tls())
        self.assertRefused(proxy.port)
        self.assertLoggedOnce(proxy, f"TLS handshake with upstream 127.0.0.1:{server.port} "
                                     "failed", "certificate has expired")

    def test_sni_is_the_server_name_and_never_an_ip_address(self):
        server = tls_support.TlsServer(PKI.path("server.pem"), PKI.path("server.key"))
        self.addCleanup(server.close)
        for server_name, expected in (("localhost", "localhost"), (None, None)):
            settings = upstream_tls() if server_name is None else upstream_tls(
                server_name=server_name)  # None: upstream.host, 127.0.0.1
            proxy = self.proxy(server.port, upstream_tls=settings)
            del server.server_names[:]
            # The stand-in hangs up after the handshake, so the AMQP handshake cannot finish.
            self.assertRefused(proxy.port)
            self.assertIn(expected, server.server_names)
            self.assertEqual(set(server.server_names), {expected})

    def test_silent_broker_times_out_within_connect_timeout(self):
        silent = socket.create_server(("127.0.0.1", 0))  # the kernel accepts; nobody answers
        self.addCleanup(silent.close)
        proxy = self.proxy(silent.getsockname()[1], upstream_tls=upstream_tls())  # 3 s
        started = time.monotonic()
        self.assertRefused(proxy.port)
        self.assertGreater(time.monotonic() - started, 2.5)
        self.assertLoggedOnce(proxy, f"the TLS handshake with upstream 127.0.0.1:"
                                     f"{silent.getsockname()[1]} did not complete within 3000 ms "
                                     "(upstream.connect_timeout)")


# ---------------------------------------------------------------- config errors

class TlsConfigErrors(unittest.TestCase):

    def config(self, listen=None, upstream=None):
        return tls_support.proxy_config(harness.free_port(), harness.BROKER_PORT, "policies",
                                        listen, upstream)

    def assertConfigError(self, text, *parts):
        code, output = tls_support.check_config(text)
        self.assertEqual(code, 1, output)
        for part in parts:
            self.assertIn(part, output)
        return output

    def test_missing_key_file(self):
        missing = PKI.path("no-such.key")
        self.assertConfigError(self.config(listen_tls(key_file=missing)),
                               "listen.tls.key_file", missing, "does not exist")

    def test_key_that_does_not_match_the_certificate(self):
        text = self.config(listen_tls(key_file=PKI.path("client.key")))
        output = self.assertConfigError(text, "listen.tls.key_file", PKI.path("client.key"),
                                        "does not match the certificate",
                                        PKI.path("server.pem"))
        self.assertRegex(output, r"nackguard\.yaml:\d+:\d+: listen\.tls\.key_file")
        # The same at a real start, not only with --check-config.
        proxy = TlsProxy(harness.BROKER_PORT, listen_tls=listen_tls(
            key_file=PKI.path("client.key")), name="mismatch-proxy")
        config = proxy.prepare()
        try:
            result = subprocess.run([harness.PROXY_BIN, "--config", config],
                                    capture_output=True, text=True, timeout=30)
            self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
            self.assertIn("does not match the certificate", result.stderr)
        finally:
            proxy.cleanup()

    def test_upstream_client_key_mismatch(self):
        self.assertConfigError(
            self.config(upstream=upstream_tls(cert_file=PKI.path("client.pem"),
                                              key_file=PKI.path("server.key"))),
            "upstream.tls.key_file", "does not match the certificate")

    def test_file_that_is_not_pem(self):
        self.assertConfigError(self.config(upstream=upstream_tls(ca_file=PKI.path("ca.cnf"))),
                               "upstream.tls.ca_file", "cannot load the CA certificates",
                               PKI.path("ca.cnf"))
        self.assertConfigError(self.config(listen_tls(cert_file=PKI.path("server.csr"))),
                               "listen.tls.cert_file", "cannot load the certificate")

    def test_check_config_describes_the_tls_settings(self):
        code, output = tls_support.check_config(self.config(
            listen_tls(ca_file=PKI.path("ca.pem"), require_client_cert=True), upstream_tls()))
        self.assertEqual(code, 0, output)
        self.assertIn("listen.tls.require_client_cert: true", output)
        self.assertIn("upstream.tls.server_name: 127.0.0.1", output)


if __name__ == "__main__":
    unittest.main()
