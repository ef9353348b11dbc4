"""The end of a ledger run: waiting (polls with deadlines) until the queue is drained, then,
with the consumers stopped, until nothing is unacked anywhere, and taking what is left: the
DLQ's dead letters with their headers, and whatever stayed in the queue or its delay
queues."""

import time

import ledger_cluster as lc  # first: it puts tests/integration on sys.path (waiting)
import ledger_traffic as lt
from ledger_plan import GOOD, kind_of
import waiting


def delay_queues(queue):
    return lc.queues_named(f"nackguard.delay.{queue}.")


class DrainWatch:
    """Whether a run has come to rest: the publisher done, the queue (and its delay queues)
    without a ready message, every confirmed good message acked, the DLQ holding at least
    as many messages as there are confirmed ids not acked, and no consumer receiving
    anything for `quiet` seconds."""

    def __init__(self, queue, ledger, progress, delayed, quiet=3.0):
        self.queue = queue
        self.ledger = ledger
        self.progress = progress
        self.delayed = delayed
        self.quiet = quiet
        self.last_receipts = -1
        self.quiet_since = None
        self.state = "not asked yet"

    def _at_rest(self):
        self.progress.update()
        now = time.monotonic()
        if self.progress.receipts != self.last_receipts:
            self.last_receipts = self.progress.receipts
            self.quiet_since = now
        with self.ledger.lock:
            confirmed = set(self.ledger.confirmed)
        missing = confirmed - self.progress.acked
        good_missing = sum(1 for i in missing if kind_of(i) == GOOD)
        ready = lt.ready_count(self.queue) or 0
        dlq = lt.ready_count(f"{self.queue}.dlq") or 0
        delayed = sum(lt.ready_count(name) or 0 for name in delay_queues(self.queue)) \
            if self.delayed else 0
        self.state = (f"ready={ready} delayed={delayed} dlq={dlq} not acked={len(missing)} "
                      f"(good {good_missing}) quiet for {now - self.quiet_since:.1f} s")
        return (ready == 0 and delayed == 0 and good_missing == 0 and len(missing) <= dlq
                and now - self.quiet_since >= self.quiet)

    def wait(self, timeout):
        def at_rest():
            try:
                return self._at_rest()
            except AssertionError as exc:  # a node not up at that moment: ask again
                self.state = f"asking failed: {exc}"
                return False

        return waiting.wait_for(at_rest, timeout, 0.5)


def wait_nothing_unacked(queues_prefix, timeout):
    """After the consumers stopped: polls until no queue of the run has an unacked message
    (a sidecar may hold a crashed consumer's close up to 45 s while it makes a copy).
    Returns (whether it happened, {queue: unacked} at the end)."""
    def unacked():
        try:
            rows = lc.queue_rows()
        except AssertionError as exc:
            return {"?": str(exc)}
        return {name: row["messages_unacknowledged"] for name, row in rows.items()
                if name.startswith(queues_prefix) and row.get("messages_unacknowledged", 0)}

    left = waiting.poll(unacked, lambda u: not u, timeout, 0.5)
    return not left, left


def take_everything(queue):
    """(dead letters, left): lists of (id, headers, redelivered) taken off the DLQ, and off
    the delay queues and the queue itself (in that order: a delayed copy that expires
    meanwhile moves into the queue, where it is still found)."""
    left = []
    for name in delay_queues(queue):
        left += lt.drain(name)
    dead_letters = lt.drain(f"{queue}.dlq")
    left += lt.drain(queue)
    return dead_letters, left
