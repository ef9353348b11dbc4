"""Support for test_tls.py: a throw-away PKI, a nackguard with TLS settings, a private
RabbitMQ node with a TLS listener, and a bare TLS server presenting any certificate.

Environment, besides harness.py's:
  NACKGUARD_TEST_TLS_START_TIMEOUT  seconds to wait for the TLS RabbitMQ node (90)

The PKI (made with the `openssl` CLI, in `Pki.dir`):
  ca.pem / ca.key              the test CA
  other-ca.pem / other-ca.key  an unrelated CA, which signed nothing used here
  server.pem / server.key      CN=localhost, SAN DNS:localhost and IP:127.0.0.1, by the CA;
                               used by the proxy's listener and by the broker
  expired.pem / expired.key    the same names, by the CA, valid only on 2020-01-01
  client.pem / client.key      CN=nackguard-tls-client, clientAuth, by the CA
"""

import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time

import pika

import harness
import private_node

HERE = os.path.dirname(os.path.abspath(__file__))

CLIENT_CN = "nackguard-tls-client"

# The TLS node: its own name, ports and epmd, so that it never meets the main test node.
TLS_NODE = "nackguard-tls@localhost"
TLS_NODE_AMQP_PORT = 24672
TLS_NODE_TLS_PORT = 24671
TLS_NODE_DIST_PORT = 24673
TLS_NODE_EPMD_PORT = 24469
TLS_NODE_START_TIMEOUT = int(os.environ.get("NACKGUARD_TEST_TLS_START_TIMEOUT") or "90")
# Held while a TLS node runs: two runs (from two build directories) would otherwise share
# the one node name and stop each other's node.
TLS_NODE_LOCK = "/tmp/nackguard-test-tls-node.lock"


def run(args, cwd=None, timeout=60, env=None):
    result = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                            env=env)
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed ({result.returncode}):\n"
                             f"{result.stdout}{result.stderr}")
    return result.stdout


# ---------------------------------------------------------------- PKI

_LEAF_EXTENSIONS = """\
[server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth, clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid, issuer
subjectAltName = DNS:localhost, IP:127.0.0.1
[client]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid, issuer
"""

# `openssl ca` is the one OpenSSL 3.0 command that takes explicit validity dates; it needs
# a small database of what it signed.
_CA_CONFIG = """\
[ca]
default_ca = test_ca
[test_ca]
database = index.txt
new_certs_dir = .
serial = serial.txt
default_md = sha256
policy = anything
unique_subject = no
x509_extensions = server
[anything]
commonName = supplied
"""


class Pki:
    def __init__(self, directory):
        self.dir = directory
        os.makedirs(directory, exist_ok=True)
        with open(self.path("extensions.cnf"), "w") as f:
            f.write(_LEAF_EXTENSIONS)

    def path(self, name):
        return os.path.join(self.dir, name)

    def _openssl(self, *args):
        return run(["openssl", *args], cwd=self.dir)

    def make_ca(self, name, cn):
        self._openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256",
                      "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "30",
                      "-subj", f"/CN={cn}",
                      "-addext", "basicConstraints=critical,CA:TRUE",
                      "-addext", "keyUsage=critical,keyCertSign,cRLSign")

    def _request(self, name, cn):
        self._openssl("req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
                      "-out", f"{name}.csr", "-subj", f"/CN={cn}")

    def make_leaf(self, name, cn, ca="ca", extensions="server"):
        self._request(name, cn)
        self._openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem",
                      "-CAkey", f"{ca}.key", "-set_serial", str(int(time.time() * 1000)),
                      "-days", "30", "-sha256", "-out", f"{name}.pem",
                      "-extfile", "extensions.cnf", "-extensions", extensions)

    def make_expired(self, name, cn, ca="ca"):
        self._request(name, cn)
        with open(self.path("ca.cnf"), "w") as f:
            f.write(_CA_CONFIG + "\n" + _LEAF_EXTENSIONS)
        with open(self.path("index.txt"), "w"):
            pass
        with open(self.path("serial.txt"), "w") as f:
            f.write("1000\n")
        self._openssl("ca", "-batch", "-config", "ca.cnf", "-cert", f"{ca}.pem",
                      "-keyfile", f"{ca}.key", "-in", f"{name}.csr", "-out", f"{name}.pem",
                      "-startdate", "20200101000000Z", "-enddate", "20200102000000Z", "-notext")

    def make_all(self):
        self.make_ca("ca", "nackguard test CA")
        self.make_ca("other-ca", "an unrelated CA")
        self.make_leaf("server", "localhost")
        self.make_expired("expired", "localhost")
        self.make_leaf("client", CLIENT_CN, extensions="client")
        # Readable by the rabbitmq user (the broker loads them); test keys only.
        os.chmod(self.dir, 0o755)
        for name in os.listdir(self.dir):
            os.chmod(self.path(name), 0o644)
        return self


def client_ssl_options(pki, cafile="ca.pem", cert=None, server_hostname="localhost"):
    """pika SSLOptions trusting `cafile`, presenting `cert` (a name in the PKI) if given."""
    context = ssl.create_default_context(cafile=pki.path(cafile))
    if cert:
        context.load_cert_chain(pki.path(f"{cert}.pem"), pki.path(f"{cert}.key"))
    return pika.SSLOptions(context, server_hostname)


# ---------------------------------------------------------------- proxy with TLS settings

def yaml_map(settings):
    """{a: 1, b: "x"}: a one-line YAML map; strings are double-quoted."""
    items = []
    for key, value in settings.items():
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, str):
            text = '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
        else:
            text = str(value)
        items.append(f"{key}: {text}")
    return "{" + ", ".join(items) + "}"


def proxy_config(port, upstream_port, policies, listen_tls=None, upstream_tls=None,
                 upstream_host=harness.BROKER_HOST, extra="", metrics_port=None):
    lines = ["# Generated by tests/integration/tls_support.py",
             "listen:", "  address: 127.0.0.1", f"  port: {port}"]
    if listen_tls is not None:
        lines.append(f"  tls: {yaml_map(listen_tls)}")
    lines += ["upstream:", f"  host: {upstream_host}", f"  port: {upstream_port}",
              "  connect_timeout: 3s"]
    if upstream_tls is not None:
        lines.append(f"  tls: {yaml_map(upstream_tls)}")
    lines += ["threads: 2", f"policies_dir: {policies}",
              f"metrics: {{address: 127.0.0.1, port: {metrics_port or harness.free_port()}}}",
              f"log: {{level: {harness.PROXY_LOG_LEVEL}, format: text}}"]
    return "\n".join(lines) + "\n" + extra


class TlsProxy(harness.Proxy):
    """A nackguard whose config has listen.tls and/or upstream.tls (maps of settings)."""

    def __init__(self, upstream_port, listen_tls=None, upstream_tls=None, name="tls-proxy",
                 extra=""):
        super().__init__(upstream_port, name=name)
        self.listen_tls = listen_tls
        self.upstream_tls = upstream_tls
        self.extra = extra

    def config_text(self):
        return proxy_config(self.port, self.upstream_port, self.policies_dir, self.listen_tls,
                            self.upstream_tls, self.upstream_host, self.extra,
                            self.metrics_port)


def check_config(config_text, name="check"):
    """Runs `nackguard --check-config` on `config_text`; returns (exit code, output)."""
    directory = tempfile.mkdtemp(prefix=f"{name}-", dir=harness.tmp_root())
    try:
        os.makedirs(os.path.join(directory, "policies"))
        path = os.path.join(directory, "nackguard.yaml")
        with open(path, "w") as f:
            f.write(config_text)
        result = subprocess.run([harness.PROXY_BIN, "--config", path, "--check-config"],
                                capture_output=True, text=True, timeout=30)
        return result.returncode, result.stdout + result.stderr
    finally:
        if not harness.KEEP_TMP:
            shutil.rmtree(directory, ignore_errors=True)


# ---------------------------------------------------------------- the TLS RabbitMQ node

def node_dir():
    """The TLS node's directory in the build tree: one per RabbitMQ version, as a 4.0 node
    runs as its root file system's rabbitmq user (another uid) and cannot write in a 3.10
    node's directory. Certificates kept in it are seen by a 4.0 node at the same path."""
    version = os.environ.get("NACKGUARD_TEST_RABBITMQ_VERSION") or "3.10"
    return os.path.join(harness.BUILD_DIR,
                        "rabbitmq-tls" if version == "3.10" else f"rabbitmq-tls-{version}")


class TlsBroker:
    """A second private RabbitMQ node, with a TLS listener on 127.0.0.1:24671 (server.pem,
    verify_peer without requiring a client certificate), the EXTERNAL mechanism
    (rabbitmq_auth_mechanism_ssl, user name from the certificate's CN), and a user named
    after the client certificate's CN."""

    def __init__(self, pki):
        self.pki = pki
        self.dir = node_dir()
        self.ctl = os.path.join(self.dir, "rabbitmqctl")
        self._lock = None
        self.started = False

    def _env(self):
        cert_dir = self.pki.dir
        return private_node.node_env(
            TLS_NODE, TLS_NODE_AMQP_PORT, TLS_NODE_DIST_PORT, TLS_NODE_EPMD_PORT, fresh=True,
            start_timeout=TLS_NODE_START_TIMEOUT, plugins="rabbitmq_auth_mechanism_ssl",
            conf_extra="\n".join([
                f"listeners.ssl.default = 127.0.0.1:{TLS_NODE_TLS_PORT}",
                f"ssl_options.cacertfile = {cert_dir}/ca.pem",
                f"ssl_options.certfile = {cert_dir}/server.pem",
                f"ssl_options.keyfile = {cert_dir}/server.key",
                "ssl_options.verify = verify_peer",
                "ssl_options.fail_if_no_peer_cert = false",
                "auth_mechanisms.1 = EXTERNAL",
                "auth_mechanisms.2 = PLAIN",
                "auth_mechanisms.3 = AMQPLAIN",
                "ssl_cert_login_from = common_name",
            ]))

    def _node(self, action, timeout):
        return private_node.node_script(action, self.dir, self._env(), timeout)

    def start(self):
        os.makedirs(self.dir, exist_ok=True)
        self._lock = harness.lock_file(TLS_NODE_LOCK, "another run of test_tls holds the TLS "
                                       "node")
        # With the lock held, a node that answers is left over from an interrupted run of
        # this test (its certificates are gone): stop it, start one with today's PKI.
        if self._node("status", 60).returncode == 0:
            print(f"note: stopping {TLS_NODE} left over from an earlier run", file=sys.stderr)
            self._node("stop", 120)
        result = self._node("start", TLS_NODE_START_TIMEOUT + 60)
        if result.returncode != 0:
            self.release()
            raise AssertionError(f"could not start the TLS RabbitMQ node {TLS_NODE}:\n"
                                 f"{result.stdout}{result.stderr}")
        self.started = True
        try:
            self._enable_external()
            if not harness.wait_for_port(TLS_NODE_TLS_PORT, 30):
                raise AssertionError(f"the TLS listener 127.0.0.1:{TLS_NODE_TLS_PORT} did not "
                                     "open")
        except BaseException:
            self.stop()  # tearDownClass does not run when setUpClass fails
            raise
        return self

    def _enable_external(self):
        # The plugin is in enabled_plugins from the start (NACKGUARD_TEST_RABBITMQ_PLUGINS):
        # the user named after the client certificate's CN is all that is left.
        self.ctl_run("add_user", CLIENT_CN, os.urandom(12).hex())
        self.ctl_run("set_permissions", "-p", "/", CLIENT_CN, ".*", ".*", ".*")

    def ctl_run(self, *args):
        return run([self.ctl, *args], timeout=60)

    def stop(self):
        try:
            if self.started:
                result = self._node("stop", 180)
                if result.returncode != 0:
                    print(f"warning: stopping {TLS_NODE} failed:\n{result.stdout}{result.stderr}",
                          file=sys.stderr)
                self.started = False
        finally:
            self.release()

    def release(self):
        if self._lock is not None:
            self._lock.close()  # releases the flock
            self._lock = None


class WithTlsBroker:
    """A TestCase mixin: `cls.broker`, a TlsBroker on the PKI that `broker_pki()` returns,
    started for the class and stopped after it."""

    broker = None

    @classmethod
    def broker_pki(cls):
        raise NotImplementedError

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.broker = TlsBroker(cls.broker_pki()).start()

    @classmethod
    def tearDownClass(cls):
        if cls.broker is not None:
            cls.broker.stop()
            cls.broker = None
        super().tearDownClass()


# ---------------------------------------------------------------- a bare TLS server

class TlsServer:
    """Accepts TLS connections on a free loopback port with the given certificate and key,
    and closes each one after its handshake (or its failure). Stands in for a broker whose
    certificate the proxy must refuse before any AMQP byte. Records the SNI names received
    (None: no SNI)."""

    def __init__(self, cert, key):
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(cert, key)
        self.server_names = []
        self.context.sni_callback = lambda _sock, name, _ctx: self.server_names.append(name)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.handshake_errors = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            conn.settimeout(10)
            try:
                with self.context.wrap_socket(conn, server_side=True) as secure:
                    secure.recv(1)
            except (OSError, ssl.SSLError) as error:
                self.handshake_errors.append(repr(error))
            finally:
                conn.close()

    def close(self):
        self.listener.close()
