"""Paths and the scenario's constants, shared by the compatibility suite's modules
(tests/compat/compat.py describes the suite)."""

import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))
CLIENTS_DIR = os.path.join(HERE, "clients")
NODE_DIR = os.path.join(HERE, "node")
sys.path.insert(0, os.path.join(REPO_ROOT, "tests", "integration"))
sys.path.insert(0, CLIENTS_DIR)

import harness  # noqa: E402  (tests/integration: broker port, build dir, proxy binary)

PYTHON = "/usr/bin/python3"
MAX_REDELIVERIES = 3
POISON = "poison"
GOOD = [f"good-{i:02d}" for i in range(20)]
MESSAGES = GOOD[:10] + [POISON] + GOOD[10:]
QUEUE_PREFIX = "nackguard-compat."
PREFETCH = 10
TIMEOUT = float(os.environ.get("NACKGUARD_COMPAT_TIMEOUT") or "60")
QUIET_SECONDS = 1.5  # after the goal is reached, so that an extra delivery would be seen
STOP_GRACE = 15.0

# The queue type every client's queue is declared with (NACKGUARD_TEST_QUEUE_TYPE, as for
# tests/integration): classic, or quorum (durable, x-queue-type quorum).
QUEUE_TYPE = (os.environ.get("NACKGUARD_TEST_QUEUE_TYPE") or "classic").strip().lower()
if QUEUE_TYPE not in ("classic", "quorum"):
    sys.exit(f"compat: NACKGUARD_TEST_QUEUE_TYPE={QUEUE_TYPE!r}: use classic or quorum")
QUEUE_ARGUMENTS = {"x-queue-type": "quorum"} if QUEUE_TYPE == "quorum" else {}

# One directory of results per variant (broker version and queue type):
# RESULTS_DIR/rabbitmq-<version>-<queue type>/<client>.json.
RESULTS_DIR = os.path.join(harness.BUILD_DIR, "compat")
REPORT_PATH = os.path.join(harness.BUILD_DIR, "compat-report.md")
DOCS_PATH = os.path.join(REPO_ROOT, "docs", "compatibility.md")

# Lines in a client's own output that mean it saw a protocol or connection problem.
PROTOCOL_ERROR_PATTERNS = re.compile(
    r"Connection to broker lost|Cannot connect to|ConnectionForced|CONNECTION_FORCED|"
    r"PreconditionFailed|PRECONDITION_FAILED|NOT_FOUND|ChannelError|ConnectionError|"
    r"AMQPError|AMQPConnectionError|UnexpectedFrame|UNEXPECTED_FRAME|FRAME_ERROR|"
    r"FrameSyntaxError|Unrecoverable error|CRITICAL/|unknown delivery tag|"
    r"PRECONDITION|connection closed|Connection closed|Socket closed|socket closed|"
    r"error: server connection error|error: unexpected method")
