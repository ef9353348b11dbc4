"""The ledger test's direct traffic with the cluster (never through a sidecar): the queue's
declaration, the publisher (publisher confirms, every id in the Ledger as published, then
confirmed, nacked or in doubt), ready counts, and the final drain of a queue with each
message's headers."""

import threading
import time

import pika
import pika.exceptions

import ledger_cluster as lc
from faults_env import CONNECTION_ERRORS, body_for, close_quietly, passive_count

BODY_BYTES = 256


def connect_any(avoid=()):
    """A pika connection to the first live node (not in `avoid`), and that node."""
    last = None
    for node in lc.live_nodes(avoid):
        try:
            params = pika.ConnectionParameters(
                host="127.0.0.1", port=node.port,
                credentials=pika.PlainCredentials("guest", "guest"), connection_attempts=1,
                socket_timeout=4, stack_timeout=8, blocked_connection_timeout=60)
            return pika.BlockingConnection(params), node
        except CONNECTION_ERRORS as exc:
            last = exc
    raise AssertionError(f"no cluster node took a connection (avoiding {avoid}): {last!r}")


def declare_quorum_queue(queue):
    conn, _ = connect_any()
    try:
        conn.channel().queue_declare(queue, durable=True, arguments=lc.QUORUM_ARGS)
    finally:
        close_quietly(conn)


def delete_queues(names):
    try:
        conn, _ = connect_any()
    except AssertionError:
        return
    try:
        for name in names:
            try:
                conn.channel().queue_delete(name)
            except Exception:
                pass
    finally:
        close_quietly(conn)


def ready_count(queue):
    """Ready messages of `queue` (passive declare on a live node); None if it does not exist."""
    conn, _ = connect_any()
    return passive_count(conn, queue)


def drain(queue):
    """Takes every ready message off `queue` (basic.get, no ack); a list of (id, headers,
    redelivered). [] if the queue does not exist."""
    found = []
    conn, _ = connect_any()
    try:
        ch = conn.channel()
        try:
            ch.queue_declare(queue, passive=True)
        except pika.exceptions.ChannelClosedByBroker as exc:
            if exc.reply_code == 404:
                return found
            raise
        while True:
            method, props, _body = ch.basic_get(queue, auto_ack=True)
            if method is None:
                return found
            found.append((props.message_id, dict(props.headers or {}), method.redelivered))
    finally:
        close_quietly(conn)


class Publisher(threading.Thread):
    """Publishes `ids` to `queue` (default exchange, persistent, mandatory, confirmed one by
    one), spread evenly over `seconds`, to one live node after another: a connection lost
    leaves its message in doubt and the next id goes out on a new connection."""

    def __init__(self, ids, queue, ledger, seconds):
        super().__init__(daemon=True, name="publisher")
        self.ids = ids
        self.queue = queue
        self.ledger = ledger
        self.seconds = seconds
        self.connects = 0
        self.errors = []      # (wall time, what)
        self.finished_at = None
        self._halt = threading.Event()

    def stop(self, timeout=30):
        self._halt.set()
        self.join(timeout)

    def _open(self):
        while not self._halt.is_set():
            try:
                conn, _ = connect_any()
                ch = conn.channel()
                ch.confirm_delivery()
                self.connects += 1
                return conn, ch
            except (AssertionError, *CONNECTION_ERRORS) as exc:
                self.errors.append((time.time(), f"connect: {exc!r}"[:200]))
                self._halt.wait(0.3)
        return None, None

    def run(self):
        conn, ch = None, None
        t0 = time.monotonic()
        step = self.seconds / max(1, len(self.ids))
        for i, msg_id in enumerate(self.ids):
            if self._halt.is_set():
                break
            while ch is None and not self._halt.is_set():
                conn, ch = self._open()
            if ch is None:
                break
            self.ledger.publish(msg_id)
            try:
                ch.basic_publish("", self.queue, body_for(msg_id, BODY_BYTES),
                                 pika.BasicProperties(message_id=msg_id, delivery_mode=2),
                                 mandatory=True)
                self.ledger.confirm(msg_id)
            except (pika.exceptions.UnroutableError, pika.exceptions.NackError) as exc:
                self.ledger.nack(msg_id)
                self.errors.append((time.time(), f"{msg_id}: {exc!r}"[:200]))
            except CONNECTION_ERRORS as exc:
                self.ledger.doubt(msg_id)
                self.errors.append((time.time(), f"{msg_id}: {exc!r}"[:200]))
                close_quietly(conn, 1.0)
                conn, ch = None, None
                continue
            delay = t0 + (i + 1) * step - time.monotonic()  # the pace, not a synchronisation
            if delay > 0:
                try:
                    conn.sleep(delay)
                except CONNECTION_ERRORS as exc:
                    self.errors.append((time.time(), f"idle: {exc!r}"[:200]))
                    close_quietly(conn, 1.0)
                    conn, ch = None, None
        close_quietly(conn)
        self.finished_at = time.time()
