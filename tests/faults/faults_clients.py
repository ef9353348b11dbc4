"""The fault tests' traffic: pika Publisher and Consumer threads with confirms and
reconnects, a Bystander stream of the two, preload(), waits on a stream's progress
(wait_flowing, wait_drained), and consumer_main, a consumer child process (a kill -9 target) run as
`python3 faults_support.py consume ...`."""

import os
import threading
import time

import pika
import pika.exceptions

import rawamqp

from faults_env import (
    BROKER_PORT, CONNECTION_ERRORS, body_for, close_quietly, connect, id_of, message_count,
    number_of, params, wait_until)


# ---------------------------------------------------------------- traffic

class ClientEvents:
    """Connection events of a client thread: (monotonic, kind, detail)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.events = []

    def add(self, kind, detail=""):
        with self.lock:
            self.events.append((time.monotonic(), kind, detail))

    def since(self, t0, kind=None):
        with self.lock:
            return [e for e in self.events if e[0] >= t0 and (kind is None or e[1] == kind)]


def describe_error(exc):
    code = getattr(exc, "reply_code", None)
    text = getattr(exc, "reply_text", None)
    if code is not None:
        return f"{type(exc).__name__}({code}, {text})"
    return f"{type(exc).__name__}({exc})"


class ClientThread(threading.Thread):
    """A client loop on its own thread, ended by stop_event."""

    def __init__(self, name):
        super().__init__(daemon=True, name=name)
        self.stop_event = threading.Event()

    def stop(self, timeout=20):
        """Asks the loop to end; whether it did within `timeout` seconds."""
        self.stop_event.set()
        self.join(timeout)
        return not self.is_alive()

    def connection_lost(self, conn, exc):
        """Notes the error and closes `conn`; returns None, the connection to use next (the
        loop reconnects after a pause)."""
        self.events.add("error", describe_error(exc))
        close_quietly(conn, 1.0)
        self.stop_event.wait(0.3)


class Publisher(ClientThread):
    """Publishes persistent messages with confirms at about `rate` a second, reconnecting
    after any connection loss. Ids are "<prefix>-<n>" with n counting from 1."""

    def __init__(self, port, queue, ledger, prefix, rate=150.0, size=256, heartbeat=None,
                 limit=None, name="publisher"):
        super().__init__(name)
        self.port = port
        self.queue = queue
        self.ledger = ledger
        self.prefix = prefix
        self.rate = rate
        self.size = size
        self.heartbeat = heartbeat
        self.limit = limit
        self.events = ClientEvents()
        self.busy_since = None   # monotonic start of the blocking call in progress
        self.longest_call = 0.0
        self.n = 0
        self.connects = 0

    def _call(self, fn, *args, **kwargs):
        self.busy_since = time.monotonic()
        try:
            return fn(*args, **kwargs)
        finally:
            self.longest_call = max(self.longest_call, time.monotonic() - self.busy_since)
            self.busy_since = None

    def run(self):
        conn = None
        while not self.stop_event.is_set():
            if self.limit is not None and self.n >= self.limit:
                break
            try:
                overrides = {} if self.heartbeat is None else {"heartbeat": self.heartbeat}
                conn = self._call(connect, self.port, **overrides)
                ch = self._call(conn.channel)
                self._call(ch.confirm_delivery)
                self.connects += 1
                self.events.add("connected")
                next_at = time.monotonic()
                while not self.stop_event.is_set():
                    if self.limit is not None and self.n >= self.limit:
                        break
                    self.n += 1
                    msg_id = f"{self.prefix}-{self.n:06d}"
                    self.ledger.publish(msg_id)
                    try:
                        self._call(ch.basic_publish, "", self.queue,
                                   body_for(msg_id, self.size),
                                   pika.BasicProperties(message_id=msg_id, delivery_mode=2),
                                   mandatory=True)
                        self.ledger.confirm(msg_id)
                    except (pika.exceptions.UnroutableError, pika.exceptions.NackError):
                        self.ledger.nack(msg_id)
                    except BaseException:
                        self.ledger.doubt(msg_id)
                        raise
                    next_at += 1.0 / self.rate
                    delay = next_at - time.monotonic()
                    if delay > 0:
                        conn.sleep(delay)
                    else:
                        next_at = time.monotonic()
            except CONNECTION_ERRORS as exc:
                conn = self.connection_lost(conn, exc)
        close_quietly(conn)
        self.events.add("stopped")


def preload(queue, count, ledger, prefix, size=256, persistent=True, port=BROKER_PORT,
            window=500, first=1):
    """Publishes `count` messages fast (raw client, pipelined confirms, at most `window`
    unconfirmed), directly to the broker unless `port` says otherwise. Ids are
    "<prefix>-<n>" for n from `first`."""
    client = rawamqp.Client(port, timeout=30)
    try:
        client.handshake()
        client.open_channel(1)
        client.confirm_select(1)
        seq_to_id = {}
        n = first
        end = first + count
        while n < end or client.outstanding:
            while n < end and len(client.outstanding) < window:
                msg_id = f"{prefix}-{n:06d}"
                ledger.publish(msg_id)
                seq = client.publish(1, queue, body_for(msg_id, size), message_id=msg_id,
                                     persistent=persistent)
                seq_to_id[seq] = msg_id
                n += 1
            client.pump(0.05)
            for seq in list(client.confirmed):
                msg_id = seq_to_id.pop(seq, None)
                if msg_id is not None:
                    ledger.confirm(msg_id)
            for seq in list(client.nacked):
                msg_id = seq_to_id.pop(seq, None)
                if msg_id is not None:
                    ledger.nack(msg_id)
            client.confirmed.clear()
            client.nacked.clear()
    finally:
        client.close()


def standard_decide(poison_every=25, flaky_every=7):
    """Poison messages (n % poison_every == 0) are always nacked with requeue; flaky ones
    (n % flaky_every == 0) are nacked on their first delivery only (not redelivered and no
    x-nackguard-returns header yet); everything else is acked."""

    def decide(msg_id, redelivered, headers):
        n = number_of(msg_id)
        if poison_every and n > 0 and n % poison_every == 0:
            return "nack"
        if flaky_every and n > 0 and n % flaky_every == 0:
            first = not redelivered and "x-nackguard-returns" not in (headers or {})
            return "nack" if first else "ack"
        return "ack"

    return decide


class Consumer(ClientThread):
    """Consumes `queue` through `port` with pika, reconnecting after any connection loss.

    decide(id, redelivered, headers) -> "ack" | "nack" (requeue) | "reject" (requeue).
    Records consumed before acking (process, then ack)."""

    def __init__(self, port, queue, ledger, decide=None, prefetch=20, work=0.0,
                 heartbeat=None, name="consumer"):
        super().__init__(name)
        self.port = port
        self.queue = queue
        self.ledger = ledger
        self.decide = decide or standard_decide()
        self.prefetch = prefetch
        self.work = work
        self.heartbeat = heartbeat
        self.events = ClientEvents()
        self.deliveries = 0
        self.last_delivery = time.monotonic()
        self.connects = 0
        self.busy_since = None

    def run(self):
        conn = None
        while not self.stop_event.is_set():
            try:
                overrides = {} if self.heartbeat is None else {"heartbeat": self.heartbeat}
                self.busy_since = time.monotonic()
                conn = connect(self.port, **overrides)
                ch = conn.channel()
                ch.basic_qos(prefetch_count=self.prefetch)
                self.busy_since = None
                self.connects += 1
                self.events.add("connected")
                for method, props, body in ch.consume(self.queue, inactivity_timeout=0.2):
                    if self.stop_event.is_set():
                        break
                    if method is None:
                        continue
                    self.deliveries += 1
                    self.last_delivery = time.monotonic()
                    msg_id = id_of(props, body)
                    if self.work:
                        time.sleep(self.work)
                    action = self.decide(msg_id, method.redelivered, props.headers)
                    if action == "ack":
                        self.ledger.consume(msg_id)
                        ch.basic_ack(method.delivery_tag)
                    elif action == "reject":
                        self.ledger.returned(msg_id)
                        ch.basic_reject(method.delivery_tag, requeue=True)
                    else:
                        self.ledger.returned(msg_id)
                        ch.basic_nack(method.delivery_tag, requeue=True)
                if self.stop_event.is_set():
                    try:
                        ch.cancel()
                    except Exception:
                        pass
            except CONNECTION_ERRORS as exc:
                self.busy_since = None
                conn = self.connection_lost(conn, exc)
        close_quietly(conn)
        self.events.add("stopped")


def wait_drained(ledger, queue, timeout, dlq_expected=None, quiet=1.5, node=None):
    """Waits until the source queue is empty and every confirmed message is consumed or
    (if dlq_expected says how many poison ids there are) dead-lettered; then `quiet` s."""
    def drained():
        try:
            ready = message_count(queue)
            dlq = message_count(f"{queue}.dlq") or 0
        except Exception:
            return False  # the node not answering at that moment: ask again
        missing = ledger.unconsumed_confirmed()
        if ready == 0 and missing <= dlq and (dlq_expected is None or dlq >= dlq_expected):
            time.sleep(quiet)  # not a wait: the window in which the queue must stay empty
            return message_count(queue) == 0
        return False

    return wait_until(drained, timeout, 0.3)


def wait_flowing(ledger, more=50, timeout=10):
    """Waits until `more` further messages are confirmed and `more // 2` further consumed
    (instead of a fixed sleep): the stream is flowing. Whether it happened; the tests assert
    the counts themselves."""
    confirmed, consumed = len(ledger.confirmed), len(ledger.consumed)
    return wait_until(lambda: len(ledger.confirmed) >= confirmed + more
                      and len(ledger.consumed) >= consumed + more // 2, timeout, 0.05)


class Bystander:
    """A steady stream beside a fault, on its own queue through `port` (whose policies must
    cover the queue): a Publisher at `rate` a second and a Consumer with prefetch 10 and
    standard_decide() (every 25th message poison). `name` prefixes the threads' names."""

    POISON_EVERY = 25

    def __init__(self, port, queue, ledger, prefix, rate, name=None):
        self.queue = queue
        self.ledger = ledger
        self.pub = Publisher(port, queue, ledger, prefix, rate=rate,
                             name=f"{name}-publisher" if name else "publisher")
        self.con = Consumer(port, queue, ledger, prefetch=10,
                            name=f"{name}-consumer" if name else "consumer")

    def start(self):
        self.con.start()
        self.pub.start()
        return self

    def stop(self, timeout=5):
        """For addCleanup: the consumer, then the publisher."""
        self.con.stop(timeout)
        self.pub.stop(timeout)

    def drain(self, timeout=30):
        """Stops publishing, waits (up to `timeout` s) until every confirmed message is
        consumed or its poison dead-lettered, stops consuming; whether it drained."""
        self.pub.stop()
        poison = sum(1 for i in self.ledger.confirmed
                     if number_of(i) % self.POISON_EVERY == 0)
        drained = wait_drained(self.ledger, self.queue, timeout, dlq_expected=poison)
        self.con.stop()
        return drained


# ---------------------------------------------------------------- consumer child process

def consumer_main(argv):
    """python3 faults_support.py consume PORT QUEUE EVENTS PREFETCH HOLD HOLD_MS POISON FLAKY

    A pika consumer that nacks at once (standard_decide) but holds the messages it will ack
    and acks them in batches: when HOLD are held or the oldest has waited HOLD_MS. So at any
    moment it has up to HOLD unacked deliveries. It writes "ack ID" (before each ack) and
    "nack ID" lines to EVENTS with unbuffered os.write: a kill -9 loses no record of a
    processed message."""
    port, queue, events_path = int(argv[0]), argv[1], argv[2]
    prefetch, hold, hold_s = int(argv[3]), int(argv[4]), int(argv[5]) / 1000.0
    decide = standard_decide(int(argv[6]), int(argv[7]))
    fd = os.open(events_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    conn = pika.BlockingConnection(params(port))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=prefetch)
    os.write(fd, b"start\n")
    held = []  # (delivery tag, id, received at)

    def flush():
        for tag, msg_id, _ in held:
            os.write(fd, f"ack {msg_id}\n".encode())
            ch.basic_ack(tag)
        held.clear()

    for method, props, body in ch.consume(queue, inactivity_timeout=0.05):
        if method is not None:
            msg_id = id_of(props, body)
            if decide(msg_id, method.redelivered, props.headers) == "ack":
                held.append((method.delivery_tag, msg_id, time.monotonic()))
            else:
                os.write(fd, f"nack {msg_id}\n".encode())
                ch.basic_nack(method.delivery_tag, requeue=True)
        if held and (len(held) >= hold or time.monotonic() - held[0][2] >= hold_s):
            flush()
    return 0
