"""deploy/prometheus and deploy/grafana: the alert rules and the dashboard use only metrics
nackguard exports, every alert has its runbook paragraph in docs/operations.md and a promtool
unit test, and every dashboard query is valid PromQL. (promtool check rules and promtool
test rules themselves run as the CTest tests deploy.promtool_*.)"""

import json
import os
import re
import subprocess
import tempfile
import unittest

import yaml

from deploy_support import (HISTOGRAMS, KNOWN_SERIES, RABBITMQ_QUEUE_SERIES, load_one,
                            markdown_anchors, metric_names, path, promtool, read)

# The situations the alert rules must cover, and the metric each one watches.
REQUIRED_ALERTS = {
    "NackguardDeadLettersRising": "nackguard_dead_letters_total",
    "NackguardQueueInOutage": "nackguard_outage",
    "NackguardFallbacks": "nackguard_fallbacks_total",
    "NackguardTrackerEvicting": "nackguard_tracker_evictions_total",
    "NackguardUpstreamConnectFailures": "nackguard_upstream_connect_failures_total",
    "NackguardDeadLetterQueueGrowing": "rabbitmq_queue_messages",
    "NackguardDeadLetterQueueDeep": "rabbitmq_queue_messages",
    "NackguardDeadLettersOnManyQueues": "nackguard_dead_letters_total",
}


def alert_rules():
    return [rule for group in load_one("deploy", "prometheus", "alerts.yaml")["groups"]
            for rule in group["rules"]]


def dashboard():
    with open(path("deploy", "grafana", "nackguard.json")) as f:
        return json.load(f)


def dashboard_panels():
    return [p for p in dashboard()["panels"] if p.get("type") != "row"]


def grafana_to_promql(expr):
    """A dashboard query with Grafana's variables replaced, so that Prometheus can parse it."""
    expr = expr.replace("$__rate_interval", "5m").replace("$__range", "1h")
    return re.sub(r"\$\{?(\w+)\}?", ".*", expr)


class AlertRules(unittest.TestCase):
    def test_required_alerts_exist_and_watch_their_metric(self):
        rules = {r["alert"]: r for r in alert_rules()}
        for name, metric in REQUIRED_ALERTS.items():
            with self.subTest(alert=name):
                self.assertIn(name, rules)
                self.assertIn(metric, metric_names(rules[name]["expr"]))

    def test_rules_use_only_exported_metrics(self):
        for rule in alert_rules():
            with self.subTest(alert=rule["alert"]):
                self.assertTrue(metric_names(rule["expr"]))
                self.assertLessEqual(metric_names(rule["expr"]), KNOWN_SERIES)

    def test_rabbitmq_rules_read_both_endpoints(self):
        # A rule on rabbitmq_queue_X (/metrics/per-object) must also read
        # rabbitmq_detailed_queue_X (/metrics/detailed), or it is silent on the other.
        for rule in alert_rules():
            names = metric_names(rule["expr"])
            for name in names & RABBITMQ_QUEUE_SERIES:
                twin = (name.replace("rabbitmq_queue_", "rabbitmq_detailed_queue_")
                        if name.startswith("rabbitmq_queue_")
                        else name.replace("rabbitmq_detailed_queue_", "rabbitmq_queue_"))
                with self.subTest(alert=rule["alert"], series=name):
                    self.assertIn(twin, names)

    def test_annotations_and_runbooks(self):
        anchors = markdown_anchors(read("docs", "operations.md"))
        for rule in alert_rules():
            with self.subTest(alert=rule["alert"]):
                self.assertIn(rule["labels"]["severity"], ("warning", "critical"))
                annotations = rule["annotations"]
                for key in ("summary", "description", "runbook_url"):
                    self.assertTrue(annotations.get(key), key)
                url = annotations["runbook_url"]
                self.assertTrue(url.startswith("docs/operations.md#"), url)
                anchor = url.split("#", 1)[1]
                self.assertEqual(anchor, rule["alert"].lower())
                self.assertIn(anchor, anchors, f"docs/operations.md has no heading for #{anchor}")

    def test_every_alert_has_a_promtool_unit_test(self):
        tests = load_one("deploy", "prometheus", "alerts_test.yaml")
        self.assertEqual(tests["rule_files"], ["alerts.yaml"])
        tested = {case["alertname"] for test in tests["tests"]
                  for case in test.get("alert_rule_test", [])
                  if any(case.get("exp_alerts") or [])}
        self.assertGreaterEqual(len(tested), 2)
        self.assertEqual(tested, {r["alert"] for r in alert_rules()},
                         "an alert that never fires in alerts_test.yaml")

    @unittest.skipUnless(promtool(), "promtool is not installed (Debian package prometheus)")
    def test_demo_prometheus_config_is_valid(self):
        out = subprocess.run([promtool(), "check", "config",
                              path("deploy", "prometheus", "prometheus.yml")],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)


class Dashboard(unittest.TestCase):
    def test_dashboard_fields(self):
        board = dashboard()
        for key in ("title", "uid", "panels", "templating", "schemaVersion"):
            self.assertIn(key, board)
        ids = [p["id"] for p in board["panels"]]
        self.assertEqual(len(ids), len(set(ids)), "panel ids must be unique")
        for panel in dashboard_panels():
            with self.subTest(panel=panel["title"]):
                self.assertTrue(panel.get("targets"))
                grid = panel["gridPos"]
                self.assertLessEqual(grid["x"] + grid["w"], 24)

    def test_queries_use_only_exported_metrics(self):
        used = set()
        for panel in dashboard_panels():
            for target in panel["targets"]:
                with self.subTest(panel=panel["title"], ref=target["refId"]):
                    names = metric_names(target["expr"])
                    self.assertTrue(names)
                    self.assertLessEqual(names, KNOWN_SERIES)
                    used |= names
        # What the dashboard must show: returns, requeues by action, dead-letters, outage,
        # the tracker and connections.
        for metric in ("nackguard_returns_total", "nackguard_requeues_total",
                       "nackguard_dead_letters_total", "nackguard_outage",
                       "nackguard_tracker_entries", "nackguard_tracker_evictions_total",
                       "nackguard_client_connections"):
            self.assertIn(metric, used)
        self.assertTrue(any(m.startswith(tuple(HISTOGRAMS)) for m in used))

    def test_requeues_are_shown_by_action(self):
        exprs = [t["expr"] for p in dashboard_panels() for t in p["targets"]
                 if "nackguard_requeues_total" in t["expr"]]
        self.assertTrue(any(re.search(r"by \(action\)", e) for e in exprs))

    @unittest.skipUnless(promtool(), "promtool is not installed (Debian package prometheus)")
    def test_queries_are_valid_promql(self):
        # promtool parses the expressions of a rules file: one recording rule per query.
        rules = [{"record": f"dashboard:panel{p['id']}:{t['refId']}",
                  "expr": grafana_to_promql(t["expr"])}
                 for p in dashboard_panels() for t in p["targets"]]
        variables = [{"record": f"dashboard:variable:{v['name']}",
                      "expr": re.sub(r"label_values\((.*),\s*\w+\)$", r"\1",
                                     grafana_to_promql(v["query"]["query"]))}
                     for v in dashboard()["templating"]["list"] if v["type"] == "query"]
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules + variables}]}, f)
        try:
            out = subprocess.run([promtool(), "check", "rules", f.name],
                                 capture_output=True, text=True, timeout=60)
        finally:
            os.unlink(f.name)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)

    def test_provisioning_points_at_the_dashboard(self):
        compose = load_one("deploy", "docker-compose.yaml")
        mounts = dict(v.split(":")[:2] for v in compose["services"]["grafana"]["volumes"])
        provider = load_one("deploy", "grafana", "provisioning", "dashboards", "nackguard.yaml")
        folder = provider["providers"][0]["options"]["path"]
        self.assertEqual(mounts["./grafana/nackguard.json"], f"{folder}/nackguard.json")
        source = load_one("deploy", "grafana", "provisioning", "datasources", "prometheus.yaml")
        self.assertEqual(source["datasources"][0]["type"], "prometheus")


if __name__ == "__main__":
    unittest.main()
