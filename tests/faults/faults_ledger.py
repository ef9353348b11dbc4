"""The fault tests' accounting: Ledger (published / confirmed / consumed / dead-lettered /
duplicated / lost), the final counts from the broker, and the wait before them until no
delivery is left unacked."""

import collections
import threading
import time


import rawamqp

from faults_env import BROKER_PORT, wait_until


# ---------------------------------------------------------------- accounting

class Ledger:
    """Who published what, what the broker confirmed, and what consumers processed.

    A consumer records a message as consumed *before* it acks it (process, then ack): a
    consumer killed between the two leaves the message unacked, and it comes back (a
    duplicate, never a loss)."""

    def __init__(self, name):
        self.name = name
        self.lock = threading.Lock()
        self.published = []            # ids in publish order
        self.confirmed = set()
        self.nacked = set()            # broker nack or unroutable: the publisher knows
        self.in_doubt = set()          # publish whose confirm never came (connection lost)
        self.consumed = collections.Counter()   # acks per id
        self.returns = collections.Counter()    # nacks(requeue) per id by consumers
        self.final = None              # filled by account()

    def publish(self, msg_id):
        with self.lock:
            self.published.append(msg_id)

    def confirm(self, msg_id):
        with self.lock:
            self.confirmed.add(msg_id)
            self.in_doubt.discard(msg_id)

    def nack(self, msg_id):
        with self.lock:
            self.nacked.add(msg_id)

    def doubt(self, msg_id):
        with self.lock:
            if msg_id not in self.confirmed:
                self.in_doubt.add(msg_id)

    def consume(self, msg_id):
        with self.lock:
            self.consumed[msg_id] += 1

    def returned(self, msg_id):
        with self.lock:
            self.returns[msg_id] += 1

    def unconsumed_confirmed(self):
        with self.lock:
            return len(self.confirmed - set(self.consumed))

    def account(self, dlq=None, delayed=None, queued=None):
        """The final account, given Counters of ids found in the DLQ, the delay queues and
        still in the source queue(s) when the test ended."""
        dlq = dlq or collections.Counter()
        delayed = delayed or collections.Counter()
        queued = queued or collections.Counter()
        with self.lock:
            everywhere = collections.Counter()
            for c in (self.consumed, dlq, delayed, queued):
                everywhere.update(c)
            confirmed = set(self.confirmed)
            lost = sorted(confirmed - set(everywhere))
            duplicated = sum(n - 1 for n in everywhere.values() if n > 1)
            unknown = sorted(set(everywhere) - set(self.published))
            self.final = {
                "published": len(self.published),
                "confirmed": len(confirmed),
                "in_doubt": len(self.in_doubt),
                "in_doubt_found": len(self.in_doubt & set(everywhere)),
                "nacked_by_broker": len(self.nacked),
                "consumed": len(set(self.consumed)),
                "consumer_acks": sum(self.consumed.values()),
                "consumer_returns": sum(self.returns.values()),
                "dead_lettered": sum(dlq.values()),
                "delayed": sum(delayed.values()),
                "queued": sum(queued.values()),
                "duplicated": duplicated,
                "lost": len(lost),
                "lost_ids": lost[:20],
                "unknown_ids": unknown[:20],
            }
            return dict(self.final)

    @staticmethod
    def summary(a):
        return (f"published={a['published']} confirmed={a['confirmed']} "
                f"(in doubt {a['in_doubt']}, {a['in_doubt_found']} of them found) "
                f"consumed={a['consumed']} dead-lettered={a['dead_lettered']} "
                f"delayed={a['delayed']} queued={a['queued']} duplicated={a['duplicated']} "
                f"lost={a['lost']}")


def drain_ids(queue, port=BROKER_PORT, batch=100):
    """Takes every ready message off `queue` (pipelined basic.get with no-ack, directly, by
    the raw client: pika cannot decode every header a hostile test leaves); a Counter of
    their ids."""
    found = collections.Counter()
    client = rawamqp.Client(port, timeout=30)
    try:
        client.handshake()
        client.open_channel(1)
        try:
            client.declare(1, queue, passive=True)
        except rawamqp.ConnectionClosedByPeer as exc:
            if "404" in str(exc) or "NOT_FOUND" in str(exc):
                return found
            raise
        empty = False
        while not empty:
            client.send(b"".join(rawamqp.basic_get(1, queue, no_ack=True)
                                 for _ in range(batch)))
            answers = 0
            deadline = time.monotonic() + 30
            while answers < batch and time.monotonic() < deadline:
                client.pump(0.05)
                for d in client.deliveries:
                    answers += 1
                    if d is None:
                        empty = True
                    else:
                        found[d.id] += 1
                client.deliveries.clear()
            if answers < batch:
                raise RuntimeError(f"draining {queue}: only {answers} of {batch} basic.get "
                                   "answered within 30 s")
    finally:
        client.close()
    return found


def delay_queue_names(node, queue):
    return sorted(n for n in node.queues(f"nackguard.delay.{queue}."))


def final_count(node, queue, extra_queues=()):
    """Drains the delay queues of `queue`, then its DLQ, then the queue itself (in that
    order: a delayed message that expires meanwhile moves into the queue, where it is
    still counted). Returns (dlq, delayed, queued) Counters."""
    delayed = collections.Counter()
    for name in delay_queue_names(node, queue):
        delayed.update(drain_ids(name))
    dlq = drain_ids(f"{queue}.dlq")
    queued = drain_ids(queue)
    for name in extra_queues:
        queued.update(drain_ids(name))
    return dlq, delayed, queued


def wait_none_unacked(node, queue, timeout=10):
    """Waits until no queue whose name starts with `queue` (the queue and its DLQ) has an
    unacked delivery: the consumers' acks and closes have reached the broker, and what they
    left is ready again, where final_count finds it. Whether it happened."""
    return wait_until(lambda: not any(unacked for _, unacked in node.queues(queue).values()),
                      timeout, 0.1)


def read_consumer_events(path, ledger):
    with open(path) as f:
        for line in f:
            kind, _, msg_id = line.strip().partition(" ")
            if kind == "ack":
                ledger.consume(msg_id)
            elif kind == "nack":
                ledger.returned(msg_id)
