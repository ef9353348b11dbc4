"""The scenarios of the transparency tests (test_features.py): each one runs against a
target (the broker itself or the proxy: harness.IntegrationTest.run_both) and returns its
observations as plain values, compared direct against proxied and with exact expectations.

  Collector          a consumer callback that records (body, delivery tag, redelivered)
  settle()           waits for a number of deliveries, then a grace for an extra one
  confirms(), basic_get(), transactions(), client_cancel(), server_cancel(),
  hundred_channels(), nack_reject_requeue(), recover(), qos(), exclusive_queue(),
  channel_404()      the scenarios, one per test
"""

import contextlib

import pika
from pika.exceptions import ChannelClosedByBroker, UnroutableError

import harness

UNROUTABLE_KEY = "nackguard-it.no-such-queue"
MISSING_QUEUE = "nackguard-it.definitely-missing-queue"


class Collector:
    """A consumer callback that records (body, delivery tag, redelivered)."""

    def __init__(self, ack=False):
        self.ack = ack
        self.seen = []

    def __call__(self, channel, method, props, body):
        self.seen.append((body.decode(), method.delivery_tag, method.redelivered))
        if self.ack:
            channel.basic_ack(method.delivery_tag)

    def __len__(self):
        return len(self.seen)


def settle(conn, collector, count, timeout=10, grace=0.3):
    """Waits for `count` deliveries, then a grace period that would show an extra one."""
    harness.drain(conn, lambda: len(collector) >= count, timeout)
    conn.process_data_events(time_limit=grace)
    return len(collector)


@contextlib.contextmanager
def queue_and_connection(target, tag):
    """A unique queue name (harness.unique_queue) and a connection to `target`, closed after."""
    with harness.unique_queue(tag) as queue:
        conn = harness.connect(target.port)
        try:
            yield queue, conn
        finally:
            harness.close_connection(conn)


@contextlib.contextmanager
def declared_queue(target, tag):
    """queue_and_connection, and a channel of that connection on which the queue is declared
    (harness.declare_queue)."""
    with queue_and_connection(target, tag) as (queue, conn):
        ch = conn.channel()
        harness.declare_queue(ch, queue)
        yield queue, conn, ch


def message_count(channel, queue):
    return channel.queue_declare(queue, passive=True).method.message_count


def wait_count(channel, queue, expected, timeout=5):
    """The queue's message count once it reaches `expected` (or the last one seen).

    A publish without confirms reaches the queue asynchronously, so a count taken
    right after it may still be short.
    """
    return harness.wait_message_count(channel, queue, expected, timeout)


def channel_error(exc, queue=None):
    text = exc.reply_text
    if queue:
        text = text.replace(queue, "<queue>")
    return (type(exc).__name__, exc.reply_code, text)


# ---------------------------------------------------------------- scenarios

def confirms(target):
    result = {}
    with declared_queue(target, "confirms") as (queue, conn, ch):
        ch.confirm_delivery()
        confirmed = 0
        for i in range(1000):
            ch.basic_publish("", queue, f"c{i}".encode())  # raises unless acked
            confirmed += 1
        result["confirmed"] = confirmed
        result["queued"] = message_count(ch, queue)
        try:
            ch.basic_publish("", UNROUTABLE_KEY, b"returned", mandatory=True,
                             properties=pika.BasicProperties(message_id="r1"))
            result["mandatory"] = "no exception"
        except UnroutableError as exc:
            result["mandatory"] = [
                (m.method.NAME, m.method.reply_code, m.method.reply_text, m.method.exchange,
                 m.method.routing_key, m.body, m.properties.message_id)
                for m in exc.messages]
        # not mandatory: dropped by the broker, still confirmed (no exception)
        ch.basic_publish("", UNROUTABLE_KEY, b"dropped")
        ch.basic_publish("", queue, b"after")
        result["queued_after"] = wait_count(ch, queue, 1001)
        result["channel_open"] = ch.is_open
    return result


def basic_get(target):
    result = []
    with declared_queue(target, "get") as (queue, conn, ch):
        result.append(("empty", ch.basic_get(queue)))
        for i in range(3):
            ch.basic_publish("", queue, f"g{i}".encode())
        result.append(("queued", wait_count(ch, queue, 3)))
        for _ in range(3):
            method, _, body = ch.basic_get(queue)
            result.append((method.NAME, body, method.delivery_tag, method.redelivered,
                           method.message_count))
            ch.basic_ack(method.delivery_tag)
        result.append(("empty again", ch.basic_get(queue)))
        method, _, body = None, None, None
        ch.basic_publish("", queue, b"auto")
        wait_count(ch, queue, 1)  # a quorum queue enqueues after the publish returns
        method, _, body = ch.basic_get(queue, auto_ack=True)
        result.append((method.NAME, body, method.delivery_tag, method.message_count))
        result.append(("left", message_count(ch, queue)))
    return result


def transactions(target):
    result = {}
    with declared_queue(target, "tx") as (queue, conn, tx):
        observer = conn.channel()
        tx.tx_select()
        tx.basic_publish("", queue, b"rolled-back")
        result["before_rollback"] = message_count(observer, queue)
        tx.tx_rollback()
        tx.basic_publish("", queue, b"committed-1")
        tx.basic_publish("", queue, b"committed-2")
        result["before_commit"] = message_count(observer, queue)
        tx.tx_commit()
        result["after_commit"] = wait_count(observer, queue, 2)
        bodies = []
        while True:
            method, _, body = observer.basic_get(queue, auto_ack=True)
            if method is None:
                break
            bodies.append((body, method.delivery_tag, method.message_count))
        result["delivered"] = bodies
        # a transactional ack: rolled back, the message stays unacked
        tx.basic_publish("", queue, b"acked-in-tx")
        tx.tx_commit()
        method, _, body = tx.basic_get(queue)
        tx.basic_ack(method.delivery_tag)
        tx.tx_rollback()
        tx.basic_ack(method.delivery_tag)
        tx.tx_commit()
        result["tx_ack"] = (body, method.delivery_tag, message_count(observer, queue))
    return result


def client_cancel(target):
    result = {}
    with declared_queue(target, "cancel") as (queue, conn, ch):
        for i in range(5):
            ch.basic_publish("", queue, f"k{i}".encode())
        ch.basic_qos(prefetch_count=1)
        got = Collector()
        tag = ch.basic_consume(queue, got)
        settle(conn, got, 1)
        ch.basic_ack(got.seen[0][1])
        settle(conn, got, 2)
        result["pending"] = ch.basic_cancel(tag)
        ch.basic_ack(got.seen[1][1])  # acking after the cancel is still valid
        ch.basic_publish("", queue, b"k5")
        ch.basic_publish("", queue, b"k6")
        settle(conn, got, 99, timeout=0.5)
        result["deliveries"] = got.seen
        result["left"] = wait_count(ch, queue, 5)
        result["consumer_tags"] = list(ch.consumer_tags)
    return result


def server_cancel(target):
    result = {}
    with declared_queue(target, "server-cancel") as (queue, conn, ch):
        other = conn.channel()
        ch.basic_publish("", queue, b"s0")
        cancels = []
        ch.add_on_cancel_callback(cancels.append)
        got = Collector(ack=True)
        tag = ch.basic_consume(queue, got)
        settle(conn, got, 1)
        result["queue_delete"] = other.queue_delete(queue).method.message_count
        harness.drain(conn, lambda: cancels, 5)
        result["cancels"] = [(f.method.NAME, f.method.consumer_tag == tag, f.channel_number)
                             for f in cancels]
        result["deliveries"] = got.seen
        result["channel_open"] = ch.is_open
        # the channel stays usable after the server's cancel
        harness.declare_queue(ch, queue)
        ch.basic_publish("", queue, b"s1")
        wait_count(ch, queue, 1)  # a quorum queue enqueues after the publish returns
        method, _, body = ch.basic_get(queue, auto_ack=True)
        result["after"] = (body, method.delivery_tag)
    return result


def hundred_channels(target, count=100, per_channel=3):
    result = []
    conn = harness.connect(target.port)
    try:
        channels = [conn.channel() for _ in range(count)]
        collectors = []
        for n, ch in enumerate(channels):
            queue = ch.queue_declare("", exclusive=True).method.queue
            for i in range(per_channel):
                ch.basic_publish("", queue, f"ch{n}-m{i}".encode())
            got = Collector(ack=True)
            ch.basic_consume(queue, got)
            collectors.append(got)
        harness.drain(conn, lambda: all(len(c) >= per_channel for c in collectors), 30)
        conn.process_data_events(time_limit=0.3)
        for ch, got in zip(channels, collectors):
            result.append((ch.channel_number, got.seen))
        for ch in channels:
            ch.close()
    finally:
        harness.close_connection(conn)
    return result


def nack_reject_requeue(target):
    with declared_queue(target, "requeue") as (queue, conn, ch):
        ch.basic_publish("", queue, b"nacked")
        ch.basic_publish("", queue, b"rejected")
        ch.basic_qos(prefetch_count=1)
        got = Collector()
        ch.basic_consume(queue, got)
        settle(conn, got, 1)
        ch.basic_nack(got.seen[-1][1], requeue=True)
        settle(conn, got, 2)
        ch.basic_ack(got.seen[-1][1])
        settle(conn, got, 3)
        ch.basic_reject(got.seen[-1][1], requeue=True)
        settle(conn, got, 4)
        ch.basic_ack(got.seen[-1][1])
        settle(conn, got, 99, timeout=0.3)
        return got.seen, message_count(ch, queue)


def recover(target):
    with declared_queue(target, "recover") as (queue, conn, ch):
        for i in range(3):
            ch.basic_publish("", queue, f"r{i}".encode())
        got = Collector()
        ch.basic_consume(queue, got)
        settle(conn, got, 3)
        ch.basic_recover(requeue=True)
        settle(conn, got, 6)
        ch.basic_ack(got.seen[-1][1], multiple=True)
        conn.process_data_events(time_limit=0.2)
        return got.seen, message_count(ch, queue)


def qos(target):
    steps = []
    with declared_queue(target, "qos") as (queue, conn, ch):
        for i in range(10):
            ch.basic_publish("", queue, f"q{i}".encode())
        ch.basic_qos(prefetch_count=3)
        got = Collector()
        ch.basic_consume(queue, got)
        steps.append(("prefetch 3", settle(conn, got, 3)))
        ch.basic_ack(got.seen[0][1])
        steps.append(("ack 1", settle(conn, got, 4)))
        ch.basic_ack(got.seen[3][1], multiple=True)
        steps.append(("ack up to 4, multiple", settle(conn, got, 7)))
        ch.basic_nack(got.seen[6][1], multiple=True, requeue=False)  # drops 5..7
        steps.append(("nack up to 7, multiple", settle(conn, got, 10)))
        ch.basic_ack(got.seen[-1][1], multiple=True)
        steps.append(("left", message_count(ch, queue)))
        steps.append(("deliveries", got.seen))
    return steps


def exclusive_queue(target):
    result = {}
    with harness.unique_queue("exclusive") as queue:
        owner = harness.connect(target.port)
        other = harness.connect(target.port)
        try:
            och = owner.channel()
            result["declare"] = och.queue_declare(queue, exclusive=True).method.message_count
            och.basic_publish("", queue, b"mine")
            for what, action in (
                    ("passive declare", lambda ch: ch.queue_declare(queue, passive=True)),
                    ("consume", lambda ch: ch.basic_consume(queue, lambda *a: None)),
                    ("get", lambda ch: ch.basic_get(queue))):
                ch = other.channel()
                try:
                    action(ch)
                    result[what] = "no error"
                except ChannelClosedByBroker as exc:
                    result[what] = channel_error(exc, queue)
            method, _, body = och.basic_get(queue, auto_ack=True)
            result["owner_get"] = (body, method.delivery_tag, method.message_count)
            result["owner_closed_cleanly"] = harness.close_connection(owner)
            ch = other.channel()
            try:
                ch.queue_declare(queue, passive=True)
                result["after_owner_closed"] = "still there"
            except ChannelClosedByBroker as exc:
                result["after_owner_closed"] = channel_error(exc, queue)
        finally:
            for conn in (owner, other):
                harness.close_connection(conn)
    return result


def channel_404(target):
    result = {}
    with queue_and_connection(target, "after-404") as (queue, conn):
        ch = conn.channel()
        try:
            ch.queue_declare(MISSING_QUEUE, passive=True)
            result["error"] = "no error"
        except ChannelClosedByBroker as exc:
            result["error"] = channel_error(exc)
        result["channel_closed"] = ch.is_closed
        result["connection_open"] = conn.is_open
        ch2 = conn.channel()
        harness.declare_queue(ch2, queue)
        ch2.basic_publish("", queue, b"still works")
        wait_count(ch2, queue, 1)  # a quorum queue enqueues after the publish returns
        method, _, body = ch2.basic_get(queue, auto_ack=True)
        result["after"] = (body, method.delivery_tag, method.message_count)
        ch3 = conn.channel()
        try:  # a second channel error on the same connection
            ch3.basic_consume(MISSING_QUEUE, lambda *a: None)
            result["error2"] = "no error"
        except ChannelClosedByBroker as exc:
            result["error2"] = channel_error(exc)
        result["connection_open_2"] = conn.is_open
        result["ch2_open"] = ch2.is_open
        result["closed_cleanly"] = harness.close_connection(conn)
    return result
