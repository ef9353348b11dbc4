"""Shared helpers for the checks of deploy/ (tests/deploy/test_*.py).

Run by CTest as deploy.manifests (/usr/bin/python3 with python3-yaml), without Docker or a
cluster. NACKGUARD_BIN (set by CTest) is the built proxy: the checks that need it run
`nackguard --check-config` on the shipped configs and start it for the container's
healthcheck; without it they are skipped.
"""

import os
import re
import shutil
import socket
import subprocess
import tempfile

import sys

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))  # waiting.py, the one way to wait
DEPLOY = os.path.join(REPO, "deploy")
DOCS = os.path.join(REPO, "docs")

# The metric names nackguard exports (proxy/metrics/metric_list.hpp); alert rules and the
# dashboard may use only these. A histogram adds _bucket, _sum and _count.
METRICS = {
    "nackguard_build_info", "nackguard_client_connections",
    "nackguard_upstream_connect_failures_total", "nackguard_frames_total",
    "nackguard_bytes_total", "nackguard_deliveries_total", "nackguard_returns_total",
    "nackguard_requeues_total", "nackguard_dead_letters_total", "nackguard_fallbacks_total",
    "nackguard_outage", "nackguard_tracker_entries", "nackguard_tracker_evictions_total",
    "nackguard_retained_body_bytes", "nackguard_policy_reloads_total",
}
HISTOGRAMS = {"nackguard_returns_before_dead_letter"}
# RabbitMQ's own per-queue series (rabbitmq_prometheus, deps/rabbitmq_prometheus in its
# source): the dead-letter queues' rules and panels read them, from /metrics/per-object
# (rabbitmq_queue_*) or /metrics/detailed (rabbitmq_detailed_queue_*), whichever is scraped.
RABBITMQ_QUEUE_SERIES = {prefix + name for prefix in ("rabbitmq_queue_", "rabbitmq_detailed_queue_")
                         for name in ("messages", "consumers")}
KNOWN_SERIES = METRICS | RABBITMQ_QUEUE_SERIES | {h + suffix for h in HISTOGRAMS
                                                  for suffix in ("_bucket", "_sum", "_count")}


def path(*parts):
    return os.path.join(REPO, *parts)


def read(*parts):
    with open(path(*parts)) as f:
        return f.read()


def load_all(*parts):
    """Every document of a YAML file, empty ones left out."""
    with open(path(*parts)) as f:
        return [doc for doc in yaml.safe_load_all(f) if doc is not None]


def load_one(*parts):
    docs = load_all(*parts)
    assert len(docs) == 1, f"{os.path.join(*parts)}: expected one YAML document, got {len(docs)}"
    return docs[0]


def metric_names(expr):
    """The nackguard_* and rabbitmq_* series names a PromQL expression uses."""
    return set(re.findall(r"\b(?:nackguard|rabbitmq)_[a-z_]+\b", expr))


def nackguard_bin():
    """The built proxy from NACKGUARD_BIN (or build/nackguard), or None."""
    candidate = os.environ.get("NACKGUARD_BIN") or path("build", "nackguard")
    return candidate if os.path.isfile(candidate) and os.access(candidate, os.X_OK) else None


def promtool():
    return shutil.which("promtool")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def github_anchor(heading):
    """The anchor GitHub gives a Markdown heading."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def markdown_anchors(markdown):
    return {github_anchor(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+)$", markdown, re.M)}


def check_config(config_text, policies, replace_policies_dir=True):
    """Runs `nackguard --config ... --check-config` on config_text with the given policy files
    ({name: text}) in a temporary policies directory that replaces policies_dir.
    Returns (exit code, output)."""
    binary = nackguard_bin()
    with tempfile.TemporaryDirectory(prefix="nackguard-deploy-") as tmp:
        policies_dir = os.path.join(tmp, "policies")
        os.makedirs(policies_dir)
        for name, text in policies.items():
            with open(os.path.join(policies_dir, name), "w") as f:
                f.write(text)
        if replace_policies_dir:
            config_text, count = re.subn(r"(?m)^(\s*policies_dir:\s*)\S+",
                                         lambda m: m.group(1) + policies_dir, config_text)
            assert count == 1, "the config has no policies_dir line to point at the test's copy"
        config = os.path.join(tmp, "nackguard.yaml")
        with open(config, "w") as f:
            f.write(config_text)
        out = subprocess.run([binary, "--config", config, "--check-config"],
                             capture_output=True, text=True, timeout=30)
        return out.returncode, out.stdout + out.stderr
