# ctest-variants: rmq40 rmq43 rmq43.quorum
"""`nackguard replay` over TLS (amqps://) and with SASL EXTERNAL, against a private RabbitMQ
node with a TLS listener (tls_support.TlsBroker, shared with test_tls, one at a time).

- amqps:// with PLAIN and --ca-file: 6 dead letters move, each copy intact (properties,
  type-exact headers, body); the broker's certificate is verified against 127.0.0.1, and with
  --server-name localhost against that name.
- ?auth_mechanism=external with --cert-file/--key-file: the broker logs the replay in as the
  certificate's CN (its list_connections says EXTERNAL), and the messages move.
- a CA that did not sign the broker's certificate, a --server-name the certificate does not
  carry, amqps:// to the plain port: exit 1, one line naming the host, OpenSSL's reason and
  the option to fix; nothing moves. --no-verify connects whatever the CA.
"""

import os
import shutil
import unittest

import harness
import tls_support
from replay_support import ReplayCase, body_of, dead_letter_headers, properties, replay

PKI = None
TLS_URL = f"amqps://guest:guest@127.0.0.1:{tls_support.TLS_NODE_TLS_PORT}/%2F"


def setUpModule():
    global PKI
    # Inside the node's directory (a 4.0 node sees it at the same path), apart from
    # test_tls's certificates.
    directory = os.path.join(tls_support.node_dir(), "replay-certs")
    shutil.rmtree(directory, ignore_errors=True)
    PKI = tls_support.Pki(directory).make_all()


class ReplayTlsTest(tls_support.WithTlsBroker, ReplayCase):
    broker_port = tls_support.TLS_NODE_AMQP_PORT

    @classmethod
    def broker_pki(cls):
        return PKI

    def replay_tls(self, url, dlq, q, *options):
        return replay("--upstream", url, "--from", dlq, "--to", q, *options)

    def test_amqps_with_plain_moves_every_message_intact(self):
        with self.queues() as (q, dlq):
            sent = self.dead_letter(dlq, 6)
            result = self.replay_tls(TLS_URL, dlq, q, "--ca-file", PKI.path("ca.pem"))
            self.assertExit(result, 0)
            self.assertIn("moved: 6\n", result[1])
            self.assertEqual(self.count(dlq), 0)
            self.assertCopiesIntact(sent, self.take_all(q))

    def test_server_name_is_the_name_checked(self):
        with self.queues() as (q, dlq):
            self.dead_letter(dlq, 2)
            result = self.replay_tls(TLS_URL, dlq, q, "--ca-file", PKI.path("ca.pem"),
                                     "--server-name", "localhost", "--limit", "1")
            self.assertExit(result, 0)
            self.assertIn("moved: 1\n", result[1])
            status, _, err = self.replay_tls(TLS_URL, dlq, q, "--ca-file", PKI.path("ca.pem"),
                                             "--server-name", "rabbit.example")
            self.assertEqual(status, 1, err)
            self.assertOneLine(err, f"the TLS handshake with 127.0.0.1:"
                               f"{tls_support.TLS_NODE_TLS_PORT} failed",
                               "certificate verify failed", "hostname mismatch",
                               "set --server-name to a name the broker's certificate carries")
            self.assertEqual(self.count(dlq), 1)
            self.assertEqual(self.count(q), 1)

    def test_sasl_external_logs_in_as_the_certificate(self):
        # A vhost guest may not use while the replay runs: only the certificate's user can
        # move these messages.
        vhost = f"replay-external-{os.urandom(4).hex()}"
        ctl = self.broker.ctl_run
        ctl("add_vhost", vhost)
        self.addCleanup(ctl, "delete_vhost", vhost)
        for user in ("guest", tls_support.CLIENT_CN):
            ctl("set_permissions", "-p", vhost, user, ".*", ".*", ".*")
        conn = harness.connect(self.broker_port, virtual_host=vhost)
        self.addCleanup(harness.close_connection, conn)
        channel = conn.channel()
        channel.confirm_delivery()
        q, dlq = "orders", "orders.dlq"
        for name in (q, dlq):
            channel.queue_declare(name, durable=True)
        sent = []
        for i in range(3):
            props = properties(i, dead_letter_headers(i, "max_redeliveries"))
            # RabbitMQ refuses a publish whose user_id is not the user logged in (guest here,
            # the certificate's CN for the replay): docs/replay.md, "user_id".
            props.user_id = None
            channel.basic_publish("", dlq, body_of(i), props)
            sent.append((props, body_of(i)))
        harness.close_connection(conn)
        ctl("clear_permissions", "-p", vhost, "guest")

        base = f"amqps://127.0.0.1:{tls_support.TLS_NODE_TLS_PORT}/{vhost}"
        certificate = ("--ca-file", PKI.path("ca.pem"), "--cert-file", PKI.path("client.pem"),
                       "--key-file", PKI.path("client.key"))
        status, _, err = self.replay_tls(base, dlq, q, *certificate)
        self.assertEqual(status, 1, err)
        self.assertOneLine(err, f"refused vhost '{vhost}' for user 'guest'")
        result = self.replay_tls(base + "?auth_mechanism=external", dlq, q, *certificate)
        self.assertExit(result, 0)
        self.assertIn("moved: 3\n", result[1])

        ctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
        conn = harness.connect(self.broker_port, virtual_host=vhost)
        self.addCleanup(harness.close_connection, conn)
        self.channel = conn.channel()
        self.assertEqual(self.count(dlq), 0)
        self.assertCopiesIntact(sent, self.take_all(q))

    def test_unknown_ca_is_one_line_and_moves_nothing(self):
        with self.queues() as (q, dlq):
            self.dead_letter(dlq, 2)
            status, _, err = self.replay_tls(TLS_URL, dlq, q, "--ca-file",
                                             PKI.path("other-ca.pem"))
            self.assertEqual(status, 1, err)
            self.assertOneLine(err, f"127.0.0.1:{tls_support.TLS_NODE_TLS_PORT} failed",
                               "certificate verify failed",
                               "--ca-file must hold the CA that signed the broker's certificate")
            self.assertEqual(self.count(dlq), 2)
            result = self.replay_tls(TLS_URL, dlq, q, "--ca-file", PKI.path("other-ca.pem"),
                                     "--no-verify")
            self.assertExit(result, 0)
            self.assertIn("moved: 2\n", result[1])

    def test_amqps_to_the_plain_port_says_so(self):
        url = f"amqps://guest:guest@127.0.0.1:{tls_support.TLS_NODE_AMQP_PORT}/"
        status, _, err = replay("--upstream", url, "--from", "a.dlq", "--to", "a",
                                "--ca-file", PKI.path("ca.pem"))
        self.assertEqual(status, 1, err)
        self.assertOneLine(err, f"127.0.0.1:{tls_support.TLS_NODE_AMQP_PORT} failed",
                           "is the URL's port its TLS port")


if __name__ == "__main__":
    unittest.main()
