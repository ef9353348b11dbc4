"""A consumer that reconnects whenever its connection ends, as a consumer of a cluster behind
one endpoint does (test_cluster.py). On top of harness.py, which it uses and does not change.
"""

import time

from pika.exceptions import AMQPError, ConnectionClosedByBroker

import harness


class ReconnectingConsumer:
    """A pika consumer through `port` that reconnects whenever its connection ends, as a
    consumer of a cluster behind one endpoint does.

    decide(consumer, delivery) returns "ack", "nack" (requeue=True), "cancel-nack" (cancel
    the consumer first, so that the requeued message stays in the queue until the next
    connection consumes again) or None (leave it unsettled); deliveries are redelivery_support.Delivery-like tuples (label, tag,
    redelivered, props, body, time). `closes` records (reply_code, reply_text) of every
    connection.close the consumer got, `connect_errors` every failed (re)connect.
    """

    def __init__(self, port, queue, decide, prefetch=50):
        self.port = port
        self.queue = queue
        self.decide = decide
        self.prefetch = prefetch
        self.conn = None
        self.ch = None
        self.deliveries = []
        self.closes = []
        self.connect_errors = []
        self.connects = 0

    def _connect(self):
        conn = harness.connect(self.port)
        try:
            ch = conn.channel()
            ch.basic_qos(prefetch_count=self.prefetch)
            ch.basic_consume(self.queue, self._on_delivery)
        except Exception:
            harness.close_connection(conn, timeout=2)
            raise
        self.conn, self.ch = conn, ch
        self.connects += 1

    def _on_delivery(self, ch, method, props, body):
        d = (body.decode(errors="replace"), method.delivery_tag, method.redelivered, props,
             body, time.monotonic())
        self.deliveries.append(d)
        action = self.decide(self, d)
        if action == "ack":
            ch.basic_ack(method.delivery_tag)
        elif action == "nack":
            ch.basic_nack(method.delivery_tag, multiple=False, requeue=True)
        elif action == "cancel-nack":
            ch.basic_cancel(method.consumer_tag)
            ch.basic_nack(method.delivery_tag, multiple=False, requeue=True)
        elif action is not None:
            raise ValueError(action)

    def _lost(self, exc):
        if isinstance(exc, ConnectionClosedByBroker):
            self.closes.append((exc.reply_code, exc.reply_text))
        self.conn = self.ch = None

    def run_until(self, done, timeout, tick=None, retry_pause=0.3):
        """Consumes (reconnecting) until done() holds; tick() runs between I/O rounds.
        Returns whether done() held before `timeout`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if done():
                return True
            if self.conn is None:
                try:
                    self._connect()
                except (AMQPError, OSError) as exc:
                    self.connect_errors.append(repr(exc))
                    time.sleep(retry_pause)  # not a wait: a pause between reconnects
                    continue
            try:
                self.conn.process_data_events(time_limit=0.05)
                if tick is not None:
                    tick()  # a tick that stops a node: the next round reads the close
            except (AMQPError, OSError) as exc:
                self._lost(exc)
        return done()

    def poll(self, seconds):
        """Consumes for `seconds` more (reconnecting if needed)."""
        end = time.monotonic() + seconds
        self.run_until(lambda: time.monotonic() >= end, seconds + 1)

    def close(self):
        if self.conn is not None:
            harness.close_connection(self.conn, timeout=3)
        self.conn = self.ch = None
