"""Shared machinery for nackguard's fault tests (tests/faults/test_*.py).

The fault tests break things on purpose: they stop, kill -9 and SIGSTOP a RabbitMQ node,
kill -9 the proxy and consumers, and feed the proxy hostile bytes. They never touch the
shared test broker (NACKGUARD_TEST_BROKER_PORT of tests/run.sh): each test module starts its
OWN private node with tests/rabbitmq-node.sh in setUpModule and stops it in tearDownModule.

Environment:
  NACKGUARD_BIN               the proxy executable (default $NACKGUARD_BUILD_DIR/nackguard)
  NACKGUARD_BUILD_DIR         build directory (default: build); the node lives in
                              $NACKGUARD_BUILD_DIR/faults-rabbitmq, temp files in
                              $NACKGUARD_BUILD_DIR/faults-tmp, results in
                              $NACKGUARD_BUILD_DIR/faults-results
  NACKGUARD_FAULTS_RABBITMQ_VERSION  3.10 (default), 4.0 or 4.3: the private node's RabbitMQ
                              (passed to tests/rabbitmq-node.sh as
                              NACKGUARD_TEST_RABBITMQ_VERSION); it also chooses the defaults
                              of the next four and the node's directory
                              ($NACKGUARD_BUILD_DIR/faults-rabbitmq, faults-rabbitmq-4.0,
                              faults-rabbitmq-4.3)
  NACKGUARD_FAULTS_NODE, NACKGUARD_FAULTS_BROKER_PORT, NACKGUARD_FAULTS_DIST_PORT,
  NACKGUARD_FAULTS_EPMD_PORT  the private node (3.10: nackguard-faults@localhost, 26672,
                              26673, 26369; 4.0: nackguard-faults40@localhost, 27672, 27673,
                              27369; 4.3: nackguard-faults43@localhost, 27772, 27773, 27469);
                              passed to tests/rabbitmq-node.sh as its
                              NACKGUARD_TEST_* variables
  NACKGUARD_TEST_QUEUE_TYPE   classic (default) or quorum: the type of the queues the tests
                              declare (quorum: durable, x-queue-type quorum)
  NACKGUARD_FAULTS_KEEP_TMP=1 keep the proxies' directories (configs, policies, logs)
  NACKGUARD_FAULTS_TEST_TIMEOUT  seconds one test may take before the watchdog dumps every
                              thread's stack and the proxies' logs and exits (300)

What is here, by module (this one re-exports them all: the tests say fs.X):
  faults_env.py      the settings above, small waits (wait_until), pika access to the node
                     (connect, declare_queues, message_count, ...)
  faults_node.py     Node, the private RabbitMQ node: start/stop, stop_app/start_app, kill -9
                     and restart, SIGSTOP/SIGCONT, rabbitmqctl; the machine lock; a process's
                     RSS and file descriptors (Sampler)
  faults_ledger.py   Ledger, the accounting: published / confirmed / consumed / dead-lettered /
                     duplicated / lost, the final counts from the broker, and the wait
                     before them until nothing is unacked (wait_none_unacked)
  faults_clients.py  Publisher, Consumer: pika threads with publisher confirms and reconnects;
                     Bystander, the two as a steady stream beside a fault; waits on a
                     stream's progress (wait_flowing, wait_drained); consumer_main, a
                     consumer child process (kill -9 target), run as
                     `python3 faults_support.py consume ...`
  faults_scripted.py ScriptedBroker, a fake upstream for more connections than the node takes
  here               FaultProxy, one nackguard process on a fixed port (so that it can be
                     killed and restarted in place) with a generated config and policies (a
                     proxy_process.Proxy); FaultTest, the unittest base: watchdog, proxies'
                     logs printed on failure, results written, the exact account of a stream
                     (assert_exact_account)

Each test module's own helpers are in support modules named after it: hostile_*.py
(test_hostile_input), process_fault_support.py and connection_burst.py
(test_process_faults), broker_fault_support.py (test_broker_faults), ledger_*.py
(test_ledger).
"""

import json
import os
import signal
import subprocess
import sys
import time
import unittest
import http.client


import rawamqp  # noqa: F401  (first: it puts tests/integration on sys.path)
import proxy_process  # noqa: E402  (tests/integration)
import faults_node
# Everything the tests use as fs.X, from the modules that hold it.
from faults_clients import *  # noqa: F401,F403
from faults_env import *  # noqa: F401,F403
from faults_ledger import *  # noqa: F401,F403
from faults_node import *  # noqa: F401,F403
from faults_scripted import *  # noqa: F401,F403


# ---------------------------------------------------------------- the proxy

def policy_yaml(queue, max_redeliveries=3, requeue="immediate", backoff=None, rate=None,
                dead_letter=None, identity=None):
    """One policy file, of the run's queue type (POLICY_QUEUE_TYPE)."""
    return proxy_process.policy_yaml(queue, max_redeliveries, identity, requeue, backoff, rate,
                                     dead_letter, queue_type=POLICY_QUEUE_TYPE)


# No per-message throttling and no outage detection: the tests count exact outcomes.
NO_RATE_LIMITS = {"window": "10s", "per_message": 1000, "outage_ratio": 1.0,
                  "min_messages": 1000000}


def delayed_policy_yaml(queue, max_redeliveries, initial, multiplier, max_delay):
    """policy_yaml with requeue: delayed, a backoff without jitter (so that the delay queues'
    names are known: nackguard.delay.QUEUE.<delay>ms) and NO_RATE_LIMITS."""
    return policy_yaml(queue, max_redeliveries, requeue="delayed",
                       backoff={"initial": initial, "multiplier": multiplier, "max": max_delay,
                                "jitter": "none"},
                       rate=NO_RATE_LIMITS)


class FaultProxy(proxy_process.Proxy):
    """A nackguard process on a fixed port with a generated config and policies.

    kill9() and restart() reuse the same port, config and policies directory, so that
    clients reconnect to the same address; each start appends to the same log."""

    def __init__(self, name, policies=None, upstream_port=BROKER_PORT, handshake="10s",
                 log_level="info", threads=2, extra_config=""):
        super().__init__(upstream_port, name=name, threads=threads, policies=policies,
                         extra_config=extra_config)
        self.handshake = handshake
        self.log_level = log_level
        self.keep_dir = KEEP_TMP
        self.starts = 0
        self.prepare()
        self.log_path = os.path.join(self.dir, "proxy.log")

    def tmp_root(self):
        return tmp_root()

    def config_text(self):
        return ("# Generated by tests/faults/faults_support.py\n"
                f"listen:   {{address: 127.0.0.1, port: {self.port}}}\n"
                f"upstream: {{host: 127.0.0.1, port: {self.upstream_port}, "
                "connect_timeout: 3s}\n"
                f"threads: {self.threads}\n"
                f"policies_dir: {self.policies_dir}\n"
                f"metrics:  {{address: 127.0.0.1, port: {self.metrics_port}}}\n"
                f"log:      {{level: {self.log_level}, format: text}}\n"
                f"timeouts: {{handshake: {self.handshake}}}\n"
                "shutdown: {grace: 1s}\n" + self.extra_config)

    def write_policy(self, file_name, text):
        """Replaces the file in one rename, as a reload must never read half of it."""
        path = self.policy_path(file_name)
        with open(path + ".tmp", "w") as f:
            f.write(text)
        os.replace(path + ".tmp", path)
        return path

    def start(self):
        log_file = open(self.log_path, "ab")
        try:
            self.process = subprocess.Popen([PROXY_BIN, "--config", self.config_path],
                                            stdin=subprocess.DEVNULL, stdout=log_file,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            log_file.close()
        self.starts += 1
        proxy_process._live_proxies.add(self)
        # The listening socket of a killed predecessor may linger for a moment.
        if not wait_for_port(self.port, 15, alive=self.alive):
            code = self.process.poll()
            self.keep_dir = True
            self.stop()
            raise RuntimeError(f"{self.name} did not start (exit code {code}); log:\n"
                               f"{self.log_text()}")
        return self

    @property
    def pid(self):
        return self.process.pid if self.process else None

    def kill9(self):
        self.process.kill()
        self.process.wait(10)

    def sighup(self):
        self.process.send_signal(signal.SIGHUP)

    def restart(self):
        if self.alive():
            self.stop()
        return self.start()

    def rss_kb(self):
        return rss_kb(self.pid)

    def fds(self):
        return fd_count(self.pid)

    def metrics(self):
        """{'name{labels}': value} scraped from /metrics ({} if it does not answer): the
        shared scrape and checking parser (Proxy.metrics), flattened, for the fault tests that
        go on while the proxy may be down."""
        try:
            return super().metrics().flat()
        except (OSError, http.client.HTTPException, AssertionError):
            return {}

    def metric_sum(self, prefix):
        return sum(v for k, v in self.metrics().items()
                   if k == prefix or k.startswith(prefix + "{"))

    def cleanup(self):
        self.stop()  # the directory goes in FaultTest.run, once the test's outcome is known

    def log_text(self, max_lines=60):
        return super().log_text(max_lines)


# ---------------------------------------------------------------- test base

def _resume_node():
    """The watchdog's last act: a node left SIGSTOPped by a hung test would outlive it."""
    node = faults_node._module_node
    if node is not None:
        os.kill(node.beam_pid(), signal.SIGCONT)


def record_result(test_id, data):
    """Appends one JSON line per test result to $BUILD_DIR/faults-results/results.jsonl
    (docs/reliability.md is written from these)."""
    os.makedirs(RESULTS_DIR, exist_ok=True)
    data = dict(data)
    data["test"] = test_id
    data["time"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    with open(os.path.join(RESULTS_DIR, "results.jsonl"), "a") as f:
        f.write(json.dumps(data, sort_keys=True) + "\n")


class FaultTest(unittest.TestCase):
    maxDiff = 4000
    watchdog_timeout = None  # seconds; None: NACKGUARD_FAULTS_TEST_TIMEOUT (300)

    def setUp(self):
        super().setUp()
        self.proxies = []
        self.queues_to_delete = []
        self.t_start = time.monotonic()
        dog = proxy_process.Watchdog(self.id(), self.watchdog_timeout or TEST_TIMEOUT,
                                     before_exit=_resume_node).start()
        self.addCleanup(dog.cancel)
        self.addCleanup(self._delete_queues)
        self.result_data = {}

    @property
    def node(self):
        """This module's private node (start_module_node in setUpModule)."""
        return faults_node._module_node

    def _delete_queues(self):
        if self.queues_to_delete:
            delete_queues(*self.queues_to_delete)

    def start_proxy(self, name=None, **kwargs):
        proxy = FaultProxy(name or self._testMethodName, **kwargs)
        self.proxies.append(proxy)
        self.addCleanup(proxy.cleanup)
        proxy.start()
        return proxy

    def start_traffic(self, proxy, queue, ledger, tag, rate, prefetch=20, decide=None,
                      heartbeat=None):
        """A publisher (`tag`, `rate` messages a second) and a consumer (`prefetch`, `decide`)
        on `queue` through `proxy`, the consumer started first; both stopped at the test's
        end. Returns (publisher, consumer)."""
        pub = Publisher(proxy.port, queue, ledger, tag, rate=rate, heartbeat=heartbeat)
        con = Consumer(proxy.port, queue, ledger, decide=decide, prefetch=prefetch,
                       heartbeat=heartbeat)
        self.addCleanup(pub.stop, 5)
        self.addCleanup(con.stop, 5)
        con.start()
        pub.start()
        return pub, con

    def queue(self, tag, declare=True):
        name = unique_queue(tag)
        self.queues_to_delete += [name, f"{name}.dlq"]
        if declare:
            declare_queues(name)
        return name

    def assert_no_loss(self, account, what=""):
        self.assertEqual(account["lost"], 0,
                         f"{what}: lost confirmed messages {account['lost_ids']}: "
                         f"{Ledger.summary(account)}")
        self.assertEqual(account["unknown_ids"], [], f"{what}: messages nobody published")

    def assert_exact_account(self, node, ledger, queue, what, extra_queues=(),
                             poison_every=25, note=""):
        """The final account of `ledger`'s stream on `queue`, at the end of a test: every
        confirmed id found (consumed, dead-lettered, delayed or still queued), no innocent
        message dead-lettered, and the queue and the proxy's own queues of the run's type."""
        types = node.queue_types(queue)
        dlq, delayed, queued = final_count(node, queue, extra_queues)
        account = ledger.account(dlq, delayed, queued)
        log(f"{what}: {Ledger.summary(account)}{note}")
        self.record(account=account)
        self.assert_no_loss(account, what)
        self.assert_only_poison_dead_lettered(dlq, poison_every, what)
        self.assertEqual(types.get(queue), QUEUE_TYPE, f"{what}: the queue's type: {types}")
        self.assert_proxy_queues_typed(node, queue, what)
        return account

    def assert_proxy_queues_typed(self, node, queue, what=""):
        """The DLQ and delay queues the proxy declared for `queue` have the queue's own type
        (QUEUE_TYPE): on a quorum queue, a dead letter or a delayed copy must not sit on one
        node's classic queue."""
        types = {name: kind for name, kind in node.queue_types().items()
                 if name == f"{queue}.dlq" or name.startswith(f"nackguard.delay.{queue}.")}
        self.record(proxy_queue_types=types)
        wrong = {name: kind for name, kind in types.items() if kind != QUEUE_TYPE}
        self.assertFalse(wrong, f"{what}: the proxy declared queues of another type for a "
                                f"{QUEUE_TYPE} queue: {types}")

    def assert_only_poison_dead_lettered(self, dlq, poison_every, what=""):
        """No innocent message in the DLQ: only ids n with n % poison_every == 0 (the ones
        the consumer always gives back) may be there (`dlq`: a Counter of ids)."""
        innocent = sorted(i for i in dlq if number_of(i) % poison_every != 0)
        self.record(innocent_dead_lettered=len(innocent))
        self.assertEqual(innocent, [], f"{what}: {len(innocent)} innocent messages "
                                       f"dead-lettered (poison: every {poison_every}th)")

    def record(self, **data):
        self.result_data.update(data)

    def run(self, result=None):
        if result is None:
            return super().run(result)
        outcome, failed = proxy_process.run_showing_logs(
            self, result, super().run, lambda: getattr(self, "proxies", []))
        for proxy in getattr(self, "proxies", []):
            if not getattr(proxy, "shared", False):  # a class-wide proxy outlives the test
                proxy.remove_dir()
        data = dict(getattr(self, "result_data", {}))
        data["seconds"] = round(time.monotonic() - getattr(self, "t_start", time.monotonic()), 1)
        data["outcome"] = "fail" if failed else "pass"
        data["rabbitmq"] = RABBITMQ_VERSION
        data["queue_type"] = QUEUE_TYPE
        try:
            record_result(self.id(), data)
        except OSError:
            pass
        return outcome


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "consume":
        sys.exit(consumer_main(sys.argv[2:]))
    print("usage: faults_support.py consume PORT QUEUE EVENTS PREFETCH HOLD HOLD_MS POISON "
          "FLAKY",
          file=sys.stderr)
    sys.exit(2)
