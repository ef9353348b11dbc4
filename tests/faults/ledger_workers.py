"""The ledger test's consumer processes (ledger_consumer.py): started behind their sidecars,
restarted when they die (a crash-poison's os._exit, the nemesis's kill -9), stopped cleanly at
the end; and their event logs read back, incrementally while the test waits for the drain,
and whole for the checker."""

import collections
import json
import os
import signal
import subprocess
import sys
import threading
import time

from ledger_consumer import CRASH_EXIT

HERE = os.path.dirname(os.path.abspath(__file__))
CONSUMER_SCRIPT = os.path.join(HERE, "ledger_consumer.py")


class Worker:
    """One consumer slot: a name, the sidecar port it uses, its event log and its process."""

    def __init__(self, index, port, run_dir):
        self.index = index
        self.name = f"c{index}"
        self.port = port
        self.events_path = os.path.join(run_dir, f"{self.name}.events")
        self.output_path = os.path.join(run_dir, f"{self.name}.out")
        self.process = None
        self.starts = 0
        self.exits = collections.Counter()  # exit code -> times (-9: killed)


class ConsumerPool:
    def __init__(self, queue, ports, run_dir, prefetch):
        """`ports`: the sidecar port of each consumer, in order."""
        self.queue = queue
        self.prefetch = prefetch
        self.workers = [Worker(i, port, run_dir) for i, port in enumerate(ports)]
        self.lock = threading.Lock()
        self.stopping = False
        self.kills = 0
        self._halt = threading.Event()
        self._supervisor = threading.Thread(target=self._supervise, daemon=True,
                                            name="consumer-supervisor")

    def start(self):
        for worker in self.workers:
            self._spawn(worker)
        self._supervisor.start()

    def _spawn(self, worker):
        with open(worker.output_path, "ab") as out:
            worker.process = subprocess.Popen(
                [sys.executable, CONSUMER_SCRIPT, worker.name, str(worker.port), self.queue,
                 worker.events_path, str(self.prefetch)],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=HERE,
                env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"), start_new_session=True)
        worker.starts += 1

    def _supervise(self):
        """Restarts a consumer as soon as it is found dead (polled every 50 ms)."""
        while not self._halt.wait(0.05):
            with self.lock:
                if self.stopping:
                    return
                for worker in self.workers:
                    code = worker.process.poll()
                    if code is not None:
                        worker.exits[code] += 1
                        self._spawn(worker)

    def kill(self, index):
        """kill -9 of one consumer (the nemesis); the supervisor starts it again."""
        with self.lock:
            worker = self.workers[index]
            if worker.process.poll() is None:
                worker.process.kill()
                self.kills += 1
                return worker.process.pid
        return None

    def stop(self, timeout=15.0):
        """SIGTERM to every consumer (each closes its connection), SIGKILL after `timeout`."""
        with self.lock:
            self.stopping = True
        self._halt.set()
        self._supervisor.join(5)
        for worker in self.workers:
            if worker.process.poll() is None:
                worker.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for worker in self.workers:
            try:
                worker.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait(5)
            worker.exits[worker.process.returncode] += 1

    def summary(self):
        starts = sum(w.starts for w in self.workers)
        crashes = sum(w.exits[CRASH_EXIT] for w in self.workers)
        killed = sum(w.exits[-signal.SIGKILL] for w in self.workers)
        other = {code: n for w in self.workers for code, n in w.exits.items()
                 if code not in (CRASH_EXIT, -signal.SIGKILL, 0)}
        return {"consumer_starts": starts, "consumer_crashes": crashes,
                "consumer_kills": killed, "consumer_other_exits": other}

    def event_paths(self):
        return [w.events_path for w in self.workers]


def read_events(paths):
    """Every event of the logs, in time order. A torn last line (a process killed while
    writing it; os.write of one line makes that unlikely) is skipped."""
    events = []
    for path in paths:
        if not os.path.exists(path):
            continue
        with open(path) as f:
            for line in f:
                try:
                    events.append(json.loads(line))
                except ValueError:
                    pass
    events.sort(key=lambda e: e["t"])
    return events


class Progress:
    """Follows the event logs while the run goes on: the ids acked so far."""

    def __init__(self, paths):
        self.offsets = {path: 0 for path in paths}
        self.acked = set()
        self.receipts = 0

    def update(self):
        for path, offset in self.offsets.items():
            if not os.path.exists(path):
                continue
            with open(path, "rb") as f:
                f.seek(offset)
                data = f.read()
            end = data.rfind(b"\n") + 1  # a line still being written waits for next time
            self.offsets[path] = offset + end
            for line in data[:end].splitlines():
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if event["ev"] == "ack":
                    self.acked.add(event["id"])
                elif event["ev"] == "recv":
                    self.receipts += 1
        return self
