"""One nackguard process for a test, and the watchdog that stops it when a test hangs.

The integration tests reach these through harness (harness.Proxy, harness.Watchdog); the
fault tests use the Watchdog too. Environment: see harness.py.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import json
import traceback

import metrics_page
import waiting

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))

BROKER_HOST = "127.0.0.1"
BUILD_DIR = os.environ.get("NACKGUARD_BUILD_DIR") or os.path.join(REPO_ROOT, "build")
PROXY_BIN = os.environ.get("NACKGUARD_BIN") or os.path.join(BUILD_DIR, "nackguard")
PROXY_LOG_LEVEL = os.environ.get("NACKGUARD_IT_PROXY_LOG_LEVEL") or "info"
KEEP_TMP = os.environ.get("NACKGUARD_IT_KEEP_TMP", "") not in ("", "0")
TEST_TIMEOUT = float(os.environ.get("NACKGUARD_IT_TEST_TIMEOUT") or "150")
PROXY_READY_TIMEOUT = 10.0
PROXY_STOP_GRACE = 5.0


def tmp_root():
    path = os.path.join(BUILD_DIR, "it-tmp")
    os.makedirs(path, exist_ok=True)
    return path


def free_port():
    """A loopback TCP port that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port, timeout, host="127.0.0.1", alive=None):
    """Waits until host:port accepts a TCP connection; False on timeout.

    `alive` is an optional callable; when it returns False the wait stops early.
    """
    def attempt():  # True: it accepts; False: alive() says stop; None: not yet
        if alive is not None and not alive():
            return False
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return True
        except OSError:
            return None

    return waiting.poll(attempt, lambda outcome: outcome is not None, timeout) is True


class ProxyError(Exception):
    pass


_live_proxies = set()  # Proxy objects whose process may be running (for the watchdog)


class Watchdog:
    """Turns a hung test (e.g. pika waiting forever for a reply the proxy lost) into
    a failure: after `timeout` s it prints all stacks and the proxies' logs, stops
    every proxy this process started (`proxies`, a set: those of this module by default),
    calls `before_exit` if given, and exits with status 3."""

    def __init__(self, test_id, timeout=TEST_TIMEOUT, proxies=None, before_exit=None):
        self._test_id = test_id
        self._timer = threading.Timer(timeout, self._fire)
        self._timer.daemon = True
        self._timeout = timeout
        self._proxies = _live_proxies if proxies is None else proxies
        self._before_exit = before_exit

    def start(self):
        self._timer.start()
        return self

    def cancel(self):
        self._timer.cancel()

    def _fire(self):
        out = sys.stderr
        print(f"\n===== WATCHDOG: {self._test_id} still running after {self._timeout:.0f}s; "
              "stacks of all threads: =====", file=out)
        for thread_id, frame in sys._current_frames().items():
            print(f"--- thread {thread_id} ---", file=out)
            traceback.print_stack(frame, file=out)
        for proxy in list(self._proxies):
            print(f"----- {proxy.name} log ({proxy.log_path}) -----\n{proxy.log_text()}", file=out)
            try:
                proxy.process.kill()
            except Exception:
                pass
        if self._before_exit is not None:
            try:
                self._before_exit()
            except Exception:
                pass
        out.flush()
        os._exit(3)



def yaml_str(value):
    return json.dumps(value)  # a JSON string is a valid double-quoted YAML scalar


def policy_yaml(queue, max_redeliveries=5, identity=None, requeue="immediate", backoff=None,
                rate=None, dead_letter=None, ack_timeout=None, queue_type=None):
    """One policy file. backoff/rate/dead_letter are dicts of already-YAML-ready values."""
    lines = [f"queue: {yaml_str(queue)}", f"max_redeliveries: {max_redeliveries}"]
    if queue_type:
        lines.append(f"queue_type: {queue_type}")
    if ack_timeout is not None:
        lines.append(f"ack_timeout: {ack_timeout}")
    if identity:
        lines.append("identity: [" + ", ".join(identity) + "]")
    lines.append(f"requeue: {requeue}")
    for key, value in (("backoff", backoff), ("rate", rate), ("dead_letter", dead_letter)):
        if value:
            lines.append(f"{key}: {{" + ", ".join(f"{k}: {v}" for k, v in value.items()) + "}")
    return "\n".join(lines) + "\n"

class Proxy:
    """One nackguard process with a generated config and policy files, on free ports.

    The integration tests' one proxy process: GuardProxy (redelivery_support), TlsProxy
    (tls_support) and OpsProxy (operations_support) change only what they must, through
    config_text(), wait_started() and SEPARATE_STDOUT. Its stdout and stderr go to `log_path`
    (stderr only with SEPARATE_STDOUT, stdout then to `stdout_path`); `log_text()` returns
    the log's last lines.
    """

    SEPARATE_STDOUT = False

    def __init__(self, upstream_port, upstream_host=BROKER_HOST, name="proxy", threads=2,
                 policies=None, extra_config=""):
        self.upstream_host = upstream_host
        # 2 runs each connection on a strand of its own; 1 (the shipped default) runs them on
        # the io_context itself, without strands (net::RelayOptions::one_thread).
        self.threads = threads
        self.upstream_port = upstream_port
        self.name = name
        self.policies = dict(policies or {})  # file name -> YAML text
        self.extra_config = extra_config      # appended to the generated config
        self.port = None
        self.metrics_port = None
        self.dir = None
        self.policies_dir = None
        self.config_path = None
        self.log_path = None
        self.stdout_path = None
        self.process = None
        self._log_file = None
        self._stdout_file = None
        self.exit_code = None
        self.keep_dir = KEEP_TMP

    def config_text(self):
        return ("# Generated by tests/integration/harness.py\n"
                f"listen:   {{address: 127.0.0.1, port: {self.port}}}\n"
                f"upstream: {{host: {self.upstream_host}, port: {self.upstream_port}}}\n"
                f"threads: {self.threads}\n"
                f"policies_dir: {self.policies_dir}\n"
                f"metrics:  {{address: 127.0.0.1, port: {self.metrics_port}}}\n"
                f"log:      {{level: {PROXY_LOG_LEVEL}, format: text}}\n"
                + self.extra_config)

    def write_config(self):
        with open(self.config_path, "w") as f:
            f.write(self.config_text())

    def policy_path(self, file_name):
        return os.path.join(self.policies_dir, file_name)

    def write_policy(self, file_name, text):
        with open(self.policy_path(file_name), "w") as f:
            f.write(text)

    def prepare(self):
        """Its directory, policy files, ports and config, without starting it; returns the
        config's path."""
        if not os.path.isfile(PROXY_BIN) or not os.access(PROXY_BIN, os.X_OK):
            raise ProxyError(f"proxy executable {PROXY_BIN} is missing or not executable "
                             "(build it, or set NACKGUARD_IT_DIRECT_ONLY=1 to test the broker "
                             "directly)")
        self.dir = tempfile.mkdtemp(prefix=f"{self.name}-", dir=self.tmp_root())
        self.policies_dir = os.path.join(self.dir, "policies")
        os.makedirs(self.policies_dir)
        for file_name, text in self.policies.items():
            self.write_policy(file_name, text)
        self.port = free_port()
        self.metrics_port = free_port()
        while self.metrics_port == self.port:
            self.metrics_port = free_port()
        self.config_path = os.path.join(self.dir, "nackguard.yaml")
        self.write_config()
        return self.config_path

    def tmp_root(self):
        """Where its directory goes."""
        return tmp_root()

    def start(self):
        self.prepare()
        self.log_path = os.path.join(self.dir,
                                     "stderr.log" if self.SEPARATE_STDOUT else "proxy.log")
        self._log_file = open(self.log_path, "wb")
        stdout = self._log_file
        if self.SEPARATE_STDOUT:
            self.stdout_path = os.path.join(self.dir, "stdout.log")
            self._stdout_file = stdout = open(self.stdout_path, "wb")
        self.process = subprocess.Popen(
            [PROXY_BIN, "--config", self.config_path],
            stdin=subprocess.DEVNULL, stdout=stdout, stderr=self._log_file,
            start_new_session=True)
        _live_proxies.add(self)  # so that the watchdog stops it
        if not self.wait_started(PROXY_READY_TIMEOUT):
            code = self.process.poll()
            self.stop()
            self.keep_dir = True
            state = (f"exited with code {code}" if code is not None
                     else f"was not ready within {PROXY_READY_TIMEOUT:.0f}s ({self.READY})")
            raise ProxyError(f"{self.name} ({PROXY_BIN} --config {self.config_path}) {state}; "
                             f"its output:\n{self.log_text()}")
        return self

    READY = "accepting TCP on its AMQP port"

    def wait_started(self, timeout):
        return wait_for_port(self.port, timeout, alive=self.alive)

    def alive(self):
        return self.process is not None and self.process.poll() is None

    def stop(self, grace=PROXY_STOP_GRACE):
        """SIGTERM, then SIGKILL after `grace` s. Returns the exit code (negative: signal)."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(grace)
            except subprocess.TimeoutExpired:
                print(f"note: {self.name} did not exit within {grace:.0f}s of "
                      "SIGTERM; sending SIGKILL", file=sys.stderr)
                self.process.kill()
                self.process.wait()
        self.exit_code = self.process.returncode
        _live_proxies.discard(self)
        for attribute in ("_log_file", "_stdout_file"):
            if getattr(self, attribute) is not None:
                getattr(self, attribute).close()
                setattr(self, attribute, None)
        return self.exit_code

    def cleanup(self):
        self.stop()
        self.remove_dir()

    def remove_dir(self):
        if self.dir and not self.keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def full_log(self):
        if not self.log_path or not os.path.exists(self.log_path):
            return ""
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def log_lines(self, needle):
        return [line for line in self.full_log().splitlines() if needle in line]

    def wait_for_log(self, needle, timeout=5.0):
        """The first log line containing `needle`, waiting for it; None if it never came."""
        return waiting.wait_for(
            lambda: next((line for line in self.full_log().splitlines() if needle in line),
                         None), timeout)

    def log_text(self, max_lines=200):
        """The log's last lines; a run of lines with the same text after the timestamp is
        shown once with its count."""
        if not self.log_path or not os.path.exists(self.log_path):
            return "(no log)"
        lines = []
        for line in self.full_log().splitlines():
            text = line.split(" ", 1)[1] if " " in line else line
            if lines and lines[-1][1] == text:
                lines[-1][2] += 1
            else:
                lines.append([line, text, 1])
        lines = [line if n == 1 else f"{line}   [x{n} in a row]" for line, _, n in lines]
        if len(lines) > max_lines:
            lines = [f"... ({len(lines) - max_lines} earlier lines in {self.log_path})"] + \
                    lines[-max_lines:]
        return "\n".join(lines) if lines else "(empty)"

    # -- its metrics port

    def get(self, path, timeout=5.0):
        return metrics_page.http_get(self.metrics_port, path, timeout=timeout)

    def metrics(self):
        status, content_type, body = self.get("/metrics")
        if status != 200:
            raise AssertionError(f"GET /metrics answered {status}: {body[:500]}")
        page = metrics_page.parse_metrics(body)
        page.content_type = content_type
        return page

    def wait_metric(self, name, want, timeout=5.0, **labels):
        """Scrapes until value(name, **labels) == want (or `want` is a callable that accepts
        the value); returns the last page."""
        def wanted(page):
            value = page.value(name, **labels)
            return want(value) if callable(want) else value == want

        return waiting.poll(self.metrics, wanted, timeout)


def run_showing_logs(test, result, run, proxies):
    """Runs `test` with `run` (its base class's unittest run method) and returns (outcome,
    failed). When the test failed, each proxy of `proxies()` (asked afterwards) keeps its
    directory, and its log is printed."""
    if result is None:
        return run(result), False
    before = len(result.failures) + len(result.errors)
    outcome = run(result)
    failed = len(result.failures) + len(result.errors) > before
    if failed:
        for proxy in proxies():
            proxy.keep_dir = True  # keep the config and the whole log for a look later
            print(f"\n----- {proxy.name} log ({proxy.log_path}) after {test.id()} -----\n"
                  f"{proxy.log_text()}\n----- end of {proxy.name} log -----", file=sys.stderr)
    return outcome, failed
