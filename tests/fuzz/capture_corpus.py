#!/usr/bin/python3
"""Capture real AMQP 0-9-1 frames from RabbitMQ into the fuzz seed corpus.

A pika client talks to a RabbitMQ node through a TCP relay on loopback; the relay records both
byte streams. A scenario covers the handshake, queue.declare with an arguments table, basic.qos,
basic.consume, publishes with many properties and headers of several types, deliveries,
get-ok/get-empty, ack, nack, reject, recover, confirms, basic.return, dead-lettering (x-death
headers), connection.blocked, heartbeats, and channel and connection closes from both sides.
The streams are split into frames, and each distinct frame is written where a target wants it:

  fuzz_frame_decoder/   whole frames, plus a few short multi-frame streams
  fuzz_methods/         method frame payloads            broker-basic.deliver.bin
  fuzz_content_header/  content header frame payloads    client-basic.publish.content-header.bin
  fuzz_field_table/     field tables cut out of payloads broker-connection.start.server-properties.bin

Files are named <side>-<what>.bin, side being who sent it (client or broker); a second distinct
frame of the same name gets -2, and so on. Files whose name starts with "synthetic-" are built
here rather than captured: they cover type letters RabbitMQ and pika never send (b B s u i f d).
The splitting, naming and writing of seeds is corpus_seeds.py's, beside this script.

Run against a private node (see tests/fuzz/README.md), for example:

  /usr/bin/python3 tests/fuzz/capture_corpus.py --port 22672 \\
      --rabbitmqctl /tmp/nackguard-capture/rabbitmqctl

Existing broker-*, client-* and synthetic-* files in the corpus directories are replaced;
regression-* seeds are left alone.
"""

import argparse
import datetime
import decimal
import os
import socket
import subprocess
import sys
import threading
import time

import pika
import pika.exceptions

from corpus_seeds import (MAX_SEED_BYTES, TARGETS, Corpus, add_multi_frame_streams,
                          add_stream, add_synthetic, split_frames)

WORK_QUEUE = "nackguard.capture.work"
DEAD_LETTER_QUEUE = "nackguard.capture.dlq"
CONSUMER_TAG = "nackguard.capture.consumer"


# ---- relay ----

class Relay:
    """Listens on 127.0.0.1 and pipes every accepted connection to the broker, recording both
    directions as (client_bytes, broker_bytes) per connection."""

    def __init__(self, broker_port):
        self.broker_port = broker_port
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.port = self.listener.getsockname()[1]
        self.connections = []
        self.threads = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            broker = socket.create_connection(("127.0.0.1", self.broker_port))
            record = (bytearray(), bytearray())
            with self.lock:
                self.connections.append(record)
            for source, sink, buffer in ((client, broker, record[0]), (broker, client, record[1])):
                thread = threading.Thread(target=self._pump, args=(source, sink, buffer),
                                          daemon=True)
                thread.start()
                self.threads.append(thread)

    @staticmethod
    def _pump(source, sink, buffer):
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                buffer.extend(data)
                sink.sendall(data)
        except OSError:
            pass
        finally:
            try:
                sink.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def finish(self):
        for thread in self.threads:
            thread.join(timeout=10)
        self.listener.close()
        with self.lock:
            return [(bytes(c), bytes(b)) for c, b in self.connections]


# ---- scenario ----

def rich_headers():
    """Headers of every type pika can send."""
    return {
        "x-retry-count": 3,                                   # I
        "trace-id": "4bf92f3577b34da6",                      # S
        "big": 2 ** 40,                                       # l
        "negative": -5,                                       # I
        "flag": True,                                         # t
        "nothing": None,                                      # V
        "price": decimal.Decimal("12.34"),                    # D
        "sent-at": datetime.datetime(2024, 1, 2, 3, 4, 5),    # T
        "raw": b"\x00\x01\xfe\xff",                           # x
        "tags": [1, "two", False, {"k": "v"}, [None]],        # A
        "origin": {"host": "capture", "attempt": {"n": 1}},   # F, nested
        "": "empty name",
        "empty": "",
    }


def all_properties(message_id):
    return pika.BasicProperties(
        content_type="application/json", content_encoding="utf-8", headers=rich_headers(),
        delivery_mode=2, priority=5, correlation_id="corr-" + message_id,
        reply_to="nackguard.capture.replies", expiration="600000", message_id=message_id,
        timestamp=1700000000, type="order.created", user_id="guest", app_id="nackguard-capture",
        cluster_id="cluster-a")


def connect(port, heartbeat=0, virtual_host="/"):
    return pika.BlockingConnection(pika.ConnectionParameters(
        host="127.0.0.1", port=port, virtual_host=virtual_host,
        credentials=pika.PlainCredentials("guest", "guest"), heartbeat=heartbeat,
        frame_max=4096,  # the spec minimum: a 9 KB body then spans three body frames
        blocked_connection_timeout=30, connection_attempts=1,
        client_properties={"connection_name": "nackguard corpus capture"}))


def wait_for(connection, condition, what, seconds=10):
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError("timed out waiting for " + what)
        connection.process_data_events(time_limit=0.1)


def main_connection(port, rabbitmqctl):
    connection = connect(port)
    channel = connection.channel()
    channel.flow(True)
    channel.queue_declare(DEAD_LETTER_QUEUE, arguments={"x-queue-type": "classic"})
    channel.queue_declare(WORK_QUEUE, durable=True, arguments={
        "x-message-ttl": 600000,
        "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": DEAD_LETTER_QUEUE,
        "x-max-length": 10000,
        "x-overflow": "reject-publish",
        "nackguard-policy": {"max-returns": 3, "backoff": [1, 2, 4], "enabled": True},
    })
    channel.queue_purge(WORK_QUEUE)
    channel.queue_purge(DEAD_LETTER_QUEUE)
    channel.basic_qos(prefetch_count=10)
    channel.confirm_delivery()

    channel.basic_publish("", WORK_QUEUE, b'{"order": 1}', all_properties("msg-1"))
    channel.basic_publish("", WORK_QUEUE, b"plain",
                          pika.BasicProperties(headers={"x-retry-count": 0}))
    channel.basic_publish("", WORK_QUEUE, bytes(range(256)) * 36,  # 9216 bytes: 3 body frames
                          pika.BasicProperties(content_type="application/octet-stream"))
    try:
        channel.basic_publish("", "nackguard.capture.nowhere", b"unroutable",
                              pika.BasicProperties(message_id="returned"), mandatory=True)
    except pika.exceptions.UnroutableError:
        pass  # basic.return, then basic.ack

    deliveries = []
    channel.basic_consume(WORK_QUEUE, lambda ch, method, props, body: deliveries.append(method),
                          consumer_tag=CONSUMER_TAG, arguments={"x-priority": 5})
    wait_for(connection, lambda: len(deliveries) == 3, "three deliveries")
    first, second, _ = (d.delivery_tag for d in deliveries)
    channel.basic_ack(first)
    channel.basic_nack(second, requeue=True)
    wait_for(connection, lambda: len(deliveries) == 4, "the redelivery")
    channel.basic_reject(deliveries[3].delivery_tag, requeue=False)  # dead-lettered: x-death
    channel.basic_recover(requeue=True)  # redelivers the third, unacked
    wait_for(connection, lambda: len(deliveries) == 5, "the recovered delivery")
    channel.basic_ack(deliveries[4].delivery_tag, multiple=True)

    channel.basic_publish("", WORK_QUEUE, b"four", pika.BasicProperties(priority=1))
    channel.basic_publish("", WORK_QUEUE, b"five", pika.BasicProperties(expiration="5000"))
    wait_for(connection, lambda: len(deliveries) == 7, "two more deliveries")
    channel.basic_nack(deliveries[6].delivery_tag, multiple=True, requeue=False)
    channel.basic_cancel(CONSUMER_TAG)

    while True:  # get-ok with x-death headers, then get-empty
        method, _, _ = channel.basic_get(DEAD_LETTER_QUEUE)
        if method is None:
            break
        channel.basic_ack(method.delivery_tag)
    channel.basic_publish("", WORK_QUEUE, b"got", all_properties("msg-get"))
    wait_for(connection, lambda: channel.basic_get(WORK_QUEUE, auto_ack=True)[0] is not None,
             "basic.get with no-ack")

    closed_by_broker = connection.channel()
    try:
        closed_by_broker.queue_declare("nackguard.capture.missing", passive=True)
    except pika.exceptions.ChannelClosedByBroker:
        pass  # channel.close 404 from the broker, channel.close-ok from the client

    if rabbitmqctl:
        capture_blocked(connection, rabbitmqctl)

    channel.queue_delete(WORK_QUEUE)
    channel.queue_delete(DEAD_LETTER_QUEUE)
    channel.close()
    connection.close()


def capture_blocked(connection, rabbitmqctl):
    """A memory alarm makes the broker send connection.blocked, and unblocked once cleared."""
    events = []
    connection.add_on_connection_blocked_callback(lambda *_: events.append("blocked"))
    connection.add_on_connection_unblocked_callback(lambda *_: events.append("unblocked"))
    channel = connection.channel()
    set_watermark(rabbitmqctl, "0")
    try:
        channel.basic_publish("", "nackguard.capture.nowhere", b"while blocked")
        wait_for(connection, lambda: "blocked" in events, "connection.blocked", seconds=15)
    finally:
        set_watermark(rabbitmqctl, "0.4")
    wait_for(connection, lambda: "unblocked" in events, "connection.unblocked", seconds=15)
    channel.close()


def set_watermark(rabbitmqctl, value):
    subprocess.run([rabbitmqctl, "set_vm_memory_high_watermark", value], check=True,
                   stdout=subprocess.DEVNULL, timeout=60)


def heartbeat_connection(port):
    connection = connect(port, heartbeat=1)
    connection.sleep(2.5)  # heartbeats both ways (the same 8 bytes: one seed)
    connection.close()


def refused_connection(port):
    try:
        connect(port, virtual_host="nackguard-no-such-vhost").close()
    except pika.exceptions.AMQPConnectionError:
        pass  # connection.close 530 from the broker


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True, help="the broker's AMQP port")
    parser.add_argument("--rabbitmqctl", help="rabbitmqctl wrapper for the same node; enables "
                        "the connection.blocked capture (it sets a memory alarm on that node)")
    parser.add_argument("--corpus", default=os.path.join(os.path.dirname(
        os.path.abspath(__file__)), "corpus"), help="corpus root (default: next to this file)")
    args = parser.parse_args()

    relay = Relay(args.port)
    main_connection(relay.port, args.rabbitmqctl)
    heartbeat_connection(relay.port)
    refused_connection(relay.port)
    streams = relay.finish()

    corpus = Corpus(args.corpus)
    corpus.reset()
    for client_stream, broker_stream in streams:
        add_stream(corpus, "client", split_frames(client_stream, True))
        add_stream(corpus, "broker", split_frames(broker_stream, False))
    add_multi_frame_streams(corpus, *streams[0])
    add_synthetic(corpus)

    for target in TARGETS:
        print("%-22s %3d seeds" % (target, corpus.written[target]))
    if corpus.skipped_large:
        print("skipped %d frames over %d bytes" % (corpus.skipped_large, MAX_SEED_BYTES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
