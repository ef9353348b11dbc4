"""Helpers for the /status tests (test_status.py, test_status_page.py).

What is here (on top of harness.py, redelivery_support.py and operations_support.py, which
it uses and does not change):
  short_id()          the 12 hex digits /status shows for a message: the start of the tracker
                      key, XXH3-128 of queue + "\\0" + identity (libxxhash, as the proxy)
  LoopingConsumer     a pika consumer on a thread of its own that nacks (requeue) one poison
                      message every `interval` seconds, up to `max_nacks` times, then holds
                      its next delivery unsettled; acks every other message
  status_json()       GET /status.json, parsed
  wait_status()       polls /status.json until a condition on it holds
  top_entries()       the /status.json top entries of one queue
  queue_row()         the /status.json queues row of one queue
  settle_reloads()    waits until the proxy's reload counts stop changing
"""

import ctypes
import json
import threading
import time

import harness
import waiting

# ---------------------------------------------------------------- tracker ids


class _XXH128(ctypes.Structure):
    _fields_ = [("low64", ctypes.c_uint64), ("high64", ctypes.c_uint64)]


_xxhash = None


def short_id(queue, identity):
    """The id /status shows for the message `identity` (e.g. "message_id:abc") on `queue`:
    the first 12 hex digits of the high 64 bits of XXH3-128(queue + "\\0" + identity)."""
    global _xxhash
    if _xxhash is None:
        lib = ctypes.CDLL("libxxhash.so.0")  # the library the proxy links (libxxhash-dev)
        lib.XXH3_128bits.restype = _XXH128
        lib.XXH3_128bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        _xxhash = lib
    data = queue.encode() + b"\0" + identity.encode()
    return f"{_xxhash.XXH3_128bits(data, len(data)).high64:016x}"[:12]


# ---------------------------------------------------------------- a consumer on a thread


class LoopingConsumer:
    """Consumes `queue` through `port` on a thread of its own (pika's connection lives and
    dies on that thread). A delivery whose message_id is `poison_id` is nacked with requeue
    `interval` seconds after it arrived, as long as fewer than `max_nacks` nacks were sent
    (None: no limit); past that it is held unsettled until allow() raises the limit or the
    consumer closes. Every other delivery is acked at once.

    The counts (nacks, deliveries, poison_deliveries, acks) are exact: only this thread
    settles, and a nack is counted when pika has written it.
    """

    def __init__(self, port, queue, poison_id, interval=0.0, max_nacks=None,
                 credentials=None, prefetch=10, name="looping-consumer"):
        self.port = port
        self.queue = queue
        self.poison_id = poison_id
        self.interval = interval
        self.credentials = credentials
        self.prefetch = prefetch
        self.nacks = 0
        self.deliveries = 0
        self.poison_deliveries = 0
        self.acks = 0
        self.error = None
        self._max_nacks = max_nacks
        self._pending = []  # [due time, delivery tag] of poison deliveries not yet settled
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._close = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self, timeout=15.0):
        self._thread.start()
        if not self._ready.wait(timeout):
            raise AssertionError(f"{self._thread.name}: not consuming after {timeout} s")
        if self.error is not None:
            raise AssertionError(f"{self._thread.name}: {self.error!r}") from self.error
        return self

    def allow(self, max_nacks):
        """Raises (or lowers) the nack limit; held deliveries become due again."""
        with self._lock:
            self._max_nacks = max_nacks

    def counts(self):
        """(nacks, deliveries, poison deliveries, acks, held deliveries) at one instant."""
        with self._lock:
            return (self.nacks, self.deliveries, self.poison_deliveries, self.acks,
                    len(self._pending))

    def wait_settled(self, acks, timeout=30.0):
        """Waits until the limit is reached, `acks` other messages were acked and the poison's
        next delivery is held (nothing of this consumer's is in flight any more). Returns
        counts(); raises AssertionError on a timeout or an error on the thread."""
        def settled():
            with self._lock:
                return (self._max_nacks is not None and self.nacks == self._max_nacks and
                        self.acks == acks and len(self._pending) == 1)

        if not waiting.wait_for(lambda: self.error is not None or settled(), timeout):
            raise AssertionError(f"{self._thread.name}: not settled in {timeout} s: "
                                 f"(nacks, deliveries, poison deliveries, acks, held) = "
                                 f"{self.counts()}, limit {self._max_nacks}, "
                                 f"want {acks} acks")
        if self.error is not None:
            raise AssertionError(f"{self._thread.name}: {self.error!r}") from self.error
        return self.counts()

    def wait_nacks(self, at_least, timeout=30.0):
        waiting.wait_for(lambda: self.nacks >= at_least or self.error is not None, timeout)
        if self.error is not None:
            raise AssertionError(f"{self._thread.name}: {self.error!r}") from self.error
        return self.nacks

    def close(self, timeout=10.0):
        self._close.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _on_delivery(self, channel, method, properties, body):
        with self._lock:
            self.deliveries += 1
            if properties.message_id == self.poison_id:
                self.poison_deliveries += 1
                self._pending.append([time.monotonic() + self.interval, method.delivery_tag])
                return
        channel.basic_ack(method.delivery_tag)
        with self._lock:
            self.acks += 1

    def _nack_due(self, channel):
        now = time.monotonic()
        while True:
            with self._lock:
                if not self._pending or self._pending[0][0] > now:
                    return
                if self._max_nacks is not None and self.nacks >= self._max_nacks:
                    return
                tag = self._pending.pop(0)[1]
            channel.basic_nack(tag, multiple=False, requeue=True)  # written at once
            with self._lock:
                self.nacks += 1

    def _run(self):
        conn = None
        try:
            overrides = {}
            if self.credentials is not None:
                overrides["credentials"] = self.credentials
            conn = harness.connect(self.port, **overrides)
            channel = conn.channel()
            channel.basic_qos(prefetch_count=self.prefetch)
            channel.basic_consume(self.queue, self._on_delivery)
            self._ready.set()
            while not self._close.is_set():
                conn.process_data_events(time_limit=0.02)
                self._nack_due(channel)
        except Exception as exc:  # reported by start()/wait_*()
            self.error = exc
        finally:
            self._ready.set()
            if conn is not None:
                harness.close_connection(conn)


# ---------------------------------------------------------------- /status.json


def status_json(proxy):
    status, content_type, body = proxy.get("/status.json")
    if status != 200:
        raise AssertionError(f"GET /status.json answered {status}: {body[:500]}")
    try:
        return json.loads(body)
    except ValueError as exc:
        raise AssertionError(f"/status.json is not JSON ({exc}): {body[:500]}") from None


def wait_status(proxy, condition, timeout=10.0, step=0.1):
    """Polls /status.json until condition(doc) is true; returns the last document (the
    caller asserts on it, so a timeout shows what was there)."""
    return waiting.poll(lambda: status_json(proxy), condition, timeout, step)


def top_entries(doc, queue):
    return [entry for entry in doc["top"] if entry["queue"] == queue]


def queue_row(doc, queue):
    rows = [row for row in doc["queues"] if row["queue"] == queue]
    if len(rows) != 1:
        raise AssertionError(f"{len(rows)} rows for {queue} in /status.json's queues: "
                             f"{doc['queues']}")
    return rows[0]


def reload_counts(doc):
    return doc["config"]["reloads"]["ok"], doc["config"]["reloads"]["error"]


def settle_reloads(proxy, quiet=2.0, timeout=15.0):
    """Waits until /status.json's reload counts have not changed for `quiet` seconds and
    returns them as (ok, error). A proxy that watches its files reloads by itself within
    about a second of a write (reload.watch: 300 ms of quiet, at most 1 s); one that does
    not never does. Either way, the next SIGHUP then adds exactly one reload."""
    last = {"counts": None, "since": None}  # the counts, and when they were first seen

    def quiet_for_long_enough():
        now = reload_counts(status_json(proxy))
        if now != last["counts"]:
            last.update(counts=now, since=time.monotonic())
            return False
        return time.monotonic() - last["since"] >= quiet

    if not waiting.wait_for(quiet_for_long_enough, timeout, 0.1):
        raise AssertionError(f"the reload counts kept changing for {timeout} s: "
                             f"{last['counts']}")
    return last["counts"]
