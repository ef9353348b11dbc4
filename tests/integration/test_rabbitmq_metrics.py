# ctest-variants: rmq40 rmq43
"""The RabbitMQ series the dead-letter queues' alert rules and dashboard panels read
(deploy/prometheus/alerts.yaml, deploy/grafana/nackguard.json), from a real broker's
rabbitmq_prometheus plugin, on 3.10, 4.0 (the rmq40 variant) and 4.3 (rmq43).

Its own node, with the plugin on 127.0.0.1: nackguard-metrics@localhost (3.10: AMQP 25672,
distribution 25673, epmd 25369, metrics 25692; 4.0: 25772, 25773, 25469, 25792; 4.3: 25872,
25873, 25569, 25892). A classic
and a quorum DLQ hold 3 and 1 messages, no consumer; then one consumer on the quorum one:

- every rabbitmq_* series the rules use is on /metrics/per-object (rabbitmq_queue_*) and on
  /metrics/detailed with the families queue_coarse_metrics and queue_consumer_count
  (rabbitmq_detailed_queue_*), with the labels vhost and queue, and the exact depths and
  consumer counts.
"""
import os
import re
import unittest
import urllib.request

import pika
import yaml

import harness
import waiting
import private_node

VERSION = private_node.VERSION
BASE = {"3.10": 25672, "4.0": 25772, "4.3": 25872}[VERSION]
AMQP_PORT, DIST_PORT, EPMD_PORT, METRICS_PORT = BASE, BASE + 1, BASE - 303, BASE + 20
DETAILED = "/metrics/detailed?family=queue_coarse_metrics&family=queue_consumer_count"
SAMPLE = re.compile(r'^(rabbitmq_\w+)\{([^}]*)\} (\S+)$')


def alert_series():
    """The rabbitmq_* series the alert rules read."""
    with open(os.path.join(harness.REPO_ROOT, "deploy", "prometheus", "alerts.yaml")) as f:
        rules = [rule for group in yaml.safe_load(f)["groups"] for rule in group["rules"]]
    return {name for rule in rules for name in re.findall(r"\brabbitmq_[a-z_]+\b", rule["expr"])}


def scrape(path):
    """{(name, vhost, queue): value} of the per-queue samples at `path`."""
    with urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT}{path}", timeout=20) as r:
        text = r.read().decode()
    samples = {}
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
        if "queue" in labels and "vhost" in labels:
            samples[(m.group(1), labels["vhost"], labels["queue"])] = float(m.group(3))
    return samples


class RabbitMQMetricsTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        build = os.environ.get("NACKGUARD_BUILD_DIR") or os.path.join(harness.REPO_ROOT, "build")
        cls.dir = os.path.join(build, "rabbitmq-metrics" +
                               ("" if VERSION == "3.10" else "-" + VERSION))
        os.makedirs(cls.dir, exist_ok=True)
        cls.env = private_node.node_env(
            "nackguard-metrics@localhost", AMQP_PORT, DIST_PORT, EPMD_PORT, fresh=True,
            plugins="rabbitmq_prometheus",
            conf_extra=f"prometheus.tcp.port = {METRICS_PORT}\nprometheus.tcp.ip = 127.0.0.1")
        started = cls.node("start", timeout=private_node.start_timeout(VERSION) + 180)
        if started.returncode != 0:
            cls.node("stop")
            raise AssertionError(f"the metrics node did not start:\n{started.stdout}"
                                 f"{started.stderr}")
        if not harness.wait_for_port(METRICS_PORT, 60):
            cls.node("stop")
            raise AssertionError(f"the plugin's listener 127.0.0.1:{METRICS_PORT} did not open")

    @classmethod
    def tearDownClass(cls):
        cls.node("stop")

    @classmethod
    def node(cls, action, timeout=180):
        return private_node.node_script(action, cls.dir, cls.env, timeout)

    def wait_for(self, path, expected):
        """Scrapes until every expected sample has its value (the plugin's figures are a few
        seconds behind); returns the last scrape."""
        def complete(samples):
            return all(samples.get(key) == value for key, value in expected.items())
        samples = waiting.poll(lambda: scrape(path), complete, 30, 1)
        if not complete(samples):
            self.fail(f"{path}: expected {expected}, got "
                      f"{ {k: v for k, v in samples.items() if k[2].endswith('.dlq')} }")
        return samples

    def test_the_rules_series_with_their_labels_and_values(self):
        conn = pika.BlockingConnection(harness.connection_params(AMQP_PORT))
        try:
            ch = conn.channel()
            ch.queue_declare("orders.dlq", durable=True)
            ch.queue_declare("payments.dlq", durable=True, arguments={"x-queue-type": "quorum"})
            for _ in range(3):
                ch.basic_publish("", "orders.dlq", b"x")
            ch.basic_publish("", "payments.dlq", b"y")
            names = alert_series()
            self.assertEqual(names, {"rabbitmq_queue_messages", "rabbitmq_queue_consumers",
                                     "rabbitmq_detailed_queue_messages",
                                     "rabbitmq_detailed_queue_consumers"})
            for path, prefix in (("/metrics/per-object", "rabbitmq_queue_"),
                                 (DETAILED, "rabbitmq_detailed_queue_")):
                self.wait_for(path, {(prefix + "messages", "/", "orders.dlq"): 3.0,
                                     (prefix + "messages", "/", "payments.dlq"): 1.0,
                                     (prefix + "consumers", "/", "orders.dlq"): 0.0,
                                     (prefix + "consumers", "/", "payments.dlq"): 0.0})
            ch.basic_consume("payments.dlq", lambda *args: None)
            for path, prefix in (("/metrics/per-object", "rabbitmq_queue_"),
                                 (DETAILED, "rabbitmq_detailed_queue_")):
                self.wait_for(path, {(prefix + "consumers", "/", "payments.dlq"): 1.0})
        finally:
            harness.close_connection(conn)


if __name__ == "__main__":
    unittest.main()
