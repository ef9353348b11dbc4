"""The clients of a legacy fleet, from Debian 12 packages: Go (amqp091-go), PHP (php-amqplib
and the php-amqp extension), Ruby (Bunny) and Java (the RabbitMQ Java client). Each one's
consumer program (tests/compat/clients/) runs in every scenario of compat_scenarios.py; this
module says how to build it, start it in a mode and name its version, and registers one suite
client per language and scenario (LANGUAGE_CLIENTS, e.g. `go-nack`, `java-crash`), which
compat_clients.py adds to CLIENTS.

Every program takes the scenario's mode as its one argument and the suite's COMPAT_*
environment (compat_clients.Run.env), and writes the events of clients/events.py.
"""

import os
import subprocess

from compat_build import GO_BINARY, JAVA_CLASSPATH, ensure_built
from compat_clients import debian_version
from compat_common import CLIENTS_DIR
from compat_scenarios import SCENARIOS


def _output(argv):
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except OSError:
        return "not installed"
    return (out.stdout or out.stderr).strip().splitlines()[0] if out.returncode == 0 \
        else "not installed"


class Language:
    name = ""
    title = ""
    notes = ""
    compiled = None          # compat_build's name for a client compiled into the build tree
    sigterm_exit_code = 0    # the exit code of a consumer stopped with SIGTERM

    def argv(self, mode):
        raise NotImplementedError

    def version(self):
        raise NotImplementedError

    def prepare(self):
        """Compiles the client into the build tree if it is compiled and not built yet."""
        if self.compiled is not None:
            ensure_built(self.compiled)


class Go(Language):
    name = "go"
    title = "amqp091-go (Go)"
    compiled = "go"
    notes = ("Debian's golang-github-rabbitmq-amqp091-go-dev, built offline in GOPATH mode "
             "(GO111MODULE=off, GOPATH=/usr/share/gocode, GOPROXY=off) into the build tree. "
             "amqp091-go has no recovery of its own: the reconnect scenario's consumer dials "
             "again from its NotifyClose loop, as Go services do.")

    def argv(self, mode):
        return [GO_BINARY, mode]

    def version(self):
        return (f"amqp091-go (Debian golang-github-rabbitmq-amqp091-go-dev "
                f"{debian_version('golang-github-rabbitmq-amqp091-go-dev')}), "
                f"{_output(['go', 'version']).removeprefix('go version ')}")


class PhpAmqplib(Language):
    name = "php-amqplib"
    title = "php-amqplib (PHP)"
    notes = ("Debian's php-amqplib on php-cli (AMQPConnectionFactory, AMQPLAIN login, its "
             "default). It has no recovery: the reconnect scenario's worker catches "
             "AMQPConnectionClosedException and connects again, as PHP workers do. Its crash "
             "is `exit(17)`: PHP runs the destructors, and php-amqplib's sends "
             "connection.close with the poison and the prefetched messages unacked.")

    def argv(self, mode):
        return ["php", os.path.join(CLIENTS_DIR, "php_consumer.php"), mode]

    def version(self):
        return (f"php-amqplib (Debian php-amqplib {debian_version('php-amqplib')}), "
                f"PHP {_output(['php', '-r', 'echo PHP_VERSION;'])}")


class PhpAmqp(Language):
    name = "php-amqp"
    title = "php-amqp extension (PHP, rabbitmq-c)"
    sigterm_exit_code = -15
    notes = ("Debian's php-amqp, the C extension on rabbitmq-c. A worker blocked in "
             "AMQPQueue::consume never runs a pcntl SIGTERM handler (measured with PHP 8.2 and "
             "php-amqp 1.11), so the suite stops it with SIGTERM's default action, as "
             "supervisord does: exit code -15, its TCP connection just ends. Its reconnect "
             "scenario catches AMQPException and connects again: the broker's "
             "connection.close reaches a worker in AMQPQueue::consume as a bare "
             "AMQPException, \"Library error: channel mismatch\", directly and through "
             "nackguard alike; nor does it answer connection.close-ok.")

    def argv(self, mode):
        return ["php", os.path.join(CLIENTS_DIR, "php_amqp_consumer.php"), mode]

    def version(self):
        extension = _output(["php", "-r", 'echo phpversion("amqp");'])
        php = _output(["php", "-r", "echo PHP_VERSION;"])
        return (f"php-amqp {extension} (Debian php-amqp {debian_version('php-amqp')}, "
                f"librabbitmq4 {debian_version('librabbitmq4')}), PHP {php}")


class Bunny(Language):
    name = "bunny"
    title = "Bunny (Ruby)"
    notes = ("Debian's ruby-bunny with its automatic recovery on (its default, "
             "network_recovery_interval 0.5 s): the reconnect scenario's consumer does "
             "nothing itself; Bunny reconnects and recovers the channel, its prefetch and "
             "the consumer. The crash is `exit!(17)` from the consumer's thread. On the "
             "broker's connection.close Bunny 2.19 recovers without answering "
             "connection.close-ok.")

    def argv(self, mode):
        return ["ruby", os.path.join(CLIENTS_DIR, "bunny_consumer.rb"), mode]

    def version(self):
        return (f"bunny (Debian ruby-bunny {debian_version('ruby-bunny')}, ruby-amq-protocol "
                f"{debian_version('ruby-amq-protocol')}), {_output(['ruby', '--version'])}")


class Java(Language):
    name = "java"
    title = "RabbitMQ Java client"
    compiled = "java"
    notes = ("Debian's librabbitmq-client-java (amqp-client 5.0.0) with automatic recovery "
             "and topology recovery on (network recovery interval 0.5 s), compiled with "
             "Debian's javac into the build tree. The consumer declares its queue, so "
             "topology recovery redeclares it and recovers the consumer and its prefetch. "
             "The crash is `Runtime.halt(17)` in the consumer's thread.")

    def argv(self, mode):
        return ["java", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xshare:auto",
                "-cp", JAVA_CLASSPATH, "JavaConsumer", mode]

    def version(self):
        return (f"amqp-client 5.0.0 (Debian librabbitmq-client-java "
                f"{debian_version('librabbitmq-client-java')}), "
                f"{_output(['java', '-version'])}")


LANGUAGES = [Go(), PhpAmqplib(), PhpAmqp(), Bunny(), Java()]
LANGUAGE_CLIENTS = [scenario(language) for language in LANGUAGES for scenario in SCENARIOS]
