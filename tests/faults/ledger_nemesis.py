"""The ledger test's nemesis: a schedule drawn from the run's seed, printed before the run,
then carried out on two lanes, each one event after another:

  process lane   kill -9 of a sidecar, then its restart (same port, config and log) after a
                 seeded pause; kill -9 of a consumer process (its supervisor restarts it)
  node lane      stop_app of one cluster node, start_app after a seeded pause, then a wait
                 until every member of the run's quorum queues is online again, before the
                 next node event: never two nodes down, so the queues keep their majority

The waits between events are the schedule (its times), not synchronisation. Each event
carried out is logged with its wall-clock times, for the checker to lay beside the messages'
deliveries."""

import random
import threading
import time

import ledger_cluster as lc

QUORUM_CATCH_UP = 90.0  # seconds a restarted node's queue members may take to be online


def make_schedule(settings):
    """[(at seconds, lane, action, target index, pause seconds)], sorted by time."""
    rng = random.Random(f"{settings.seed}/nemesis")
    span = settings.publish_seconds
    kills, consumer_kills, node_stops = (6, 6, 4) if settings.long else (2, 3, 2)
    events = []
    for _ in range(kills):
        events.append((rng.uniform(3, span), "process", "kill_sidecar",
                       rng.randrange(settings.sidecars), rng.uniform(0.2, 3.0)))
    for _ in range(consumer_kills):
        events.append((rng.uniform(3, span), "process", "kill_consumer",
                       rng.randrange(settings.consumers), 0.0))
    # Node stops spread over the span: each in its own slice, so that one has time to come
    # back and catch up before the next.
    slice_len = span / node_stops
    for i in range(node_stops):
        events.append((i * slice_len + rng.uniform(2, max(2.5, slice_len / 2)), "node",
                       "stop_node", rng.randrange(3), rng.uniform(2.0, 8.0)))
    return sorted((round(at, 1), lane, action, target, round(pause, 1))
                  for at, lane, action, target, pause in events)


def describe_event(event, sidecars=None):
    at, lane, action, target, pause = event
    if action == "kill_sidecar":
        name = sidecars[target].name if sidecars else f"sidecar{'AB'[target]}"
        what = f"kill -9 {name}, restart after {pause:.1f} s"
    elif action == "kill_consumer":
        what = f"kill -9 consumer c{target}"
    else:
        what = f"stop_app {lc.NODES[target].name}, start_app after {pause:.1f} s"
    return f"+{at:6.1f}s  {lane:7}  {what}"


class Nemesis:
    def __init__(self, schedule, sidecars, pool, queues):
        self.schedule = schedule
        self.sidecars = sidecars
        self.pool = pool
        self.queues = queues  # name prefixes of the quorum queues that must be back online
        self.log = []         # dicts: action, target, at, begin, end (wall), detail
        self.errors = []
        self.lock = threading.Lock()
        self._halt = threading.Event()
        self._threads = []
        self._down = None     # the node whose app is stopped now
        self.t0 = None

    def start(self):
        self.t0 = time.monotonic()
        for lane in ("process", "node"):
            events = [e for e in self.schedule if e[1] == lane]
            thread = threading.Thread(target=self._run_lane, args=(events,), daemon=True,
                                      name=f"nemesis-{lane}")
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self, timeout=180):
        """Ends the schedule (an event under way finishes), and brings a stopped node back."""
        self._halt.set()
        for thread in self._threads:
            thread.join(timeout)
        if self._down is not None:
            lc.start_app(self._down)
            self._down = None

    def finished(self):
        return all(not thread.is_alive() for thread in self._threads)

    def _record(self, entry):
        with self.lock:
            self.log.append(entry)

    def _run_lane(self, events):
        for event in events:
            delay = self.t0 + event[0] - time.monotonic()
            if delay > 0 and self._halt.wait(delay):  # the schedule's own pace
                return
            if self._halt.is_set():
                return
            begin = time.time()
            try:
                detail = self._carry_out(event)
            except Exception as exc:  # recorded; the test fails on it
                detail = f"ERROR {exc!r}"[:300]
                with self.lock:
                    self.errors.append(f"{describe_event(event, self.sidecars)}: {detail}")
            self._record({"at": event[0], "action": event[2], "target": event[3],
                          "begin": begin, "end": time.time(), "detail": detail})

    def _carry_out(self, event):
        _, _, action, target, pause = event
        if action == "kill_sidecar":
            sidecar = self.sidecars[target]
            sidecar.kill9()
            killed = time.time()
            self._halt.wait(pause)  # the schedule's pause, then the restart
            sidecar.start()
            return {"sidecar": sidecar.name, "killed": killed, "up": time.time()}
        if action == "kill_consumer":
            pid = self.pool.kill(target)
            return {"consumer": f"c{target}", "pid": pid}
        node = lc.NODES[target]
        if not lc.wait_quorum_online(self.queues, QUORUM_CATCH_UP):
            raise AssertionError(f"quorum members still offline before stopping {node.name}")
        self._down = node
        lc.stop_app(node)
        down = time.time()
        self._halt.wait(pause)
        lc.start_app(node)
        self._down = None
        up = time.time()
        if not lc.wait_quorum_online(self.queues, QUORUM_CATCH_UP):
            raise AssertionError(f"quorum members of {self.queues} not online "
                                 f"{QUORUM_CATCH_UP:.0f} s after start_app of {node.name}")
        return {"node": node.name, "down": down, "up": up, "online": time.time()}

    def summary(self):
        counts = {}
        for entry in self.log:
            counts[entry["action"]] = counts.get(entry["action"], 0) + 1
        return counts
