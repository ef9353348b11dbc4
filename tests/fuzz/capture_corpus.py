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

Run against a private node (see tests/fuzz/README.md), for example:

  /usr/bin/python3 tests/fuzz/capture_corpus.py --port 22672 \\
      --rabbitmqctl /tmp/nackguard-capture/rabbitmqctl

Existing broker-*, client-* and synthetic-* files in the corpus directories are replaced;
regression-* seeds are left alone.
"""

import argparse
import datetime
import decimal
import hashlib
import os
import re
import socket
import struct
import subprocess
import sys
import threading
import time

import pika
import pika.exceptions

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
FRAME_END = 0xCE
MAX_SEED_BYTES = 8 * 1024
MAX_VARIANTS = 3  # distinct frames kept under one name

# Method names and the methods the codec decodes come from the C++ sources, which hold the one
# table of each: proxy/amqp/method_name.cpp's kNames ({method_key(C, M), "name"}) names every
# method, and proxy/amqp/methods.hpp's structs (kKey = mid::NAME, a key of constants.hpp's
# namespace mid) are what the codec decodes, so their payloads go to fuzz_methods. Other
# methods seen on the wire (queue.delete, ...) still go to the frame decoder corpus.
AMQP_SOURCES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "proxy", "amqp")
_NAME_ENTRY = re.compile(r'^ *\{method_key\(([0-9]+), ([0-9]+)\), "([a-z]+\.[a-z-]+)"\},$')
_MID_ENTRY = re.compile(r"^inline constexpr std::uint32_t ([a-z_]+) = method_key\(([0-9]+), "
                        r"([0-9]+)\);$")
_STRUCT_KEY = re.compile(r"^ *static constexpr std::uint32_t kKey = mid::([a-z_]+);$")


def read_entries(file_name, marker, pattern):
    """The groups of `pattern` on every line of proxy/amqp/<file_name> that holds `marker`.
    Exits naming the file when a line with the marker does not match (the C++ changed shape)
    or when there is none."""
    path = os.path.join(AMQP_SOURCES, file_name)
    try:
        with open(path, encoding="utf-8") as source:
            lines = source.read().splitlines()
    except OSError as exc:
        sys.exit(f"capture_corpus.py: cannot read {path}: {exc}")
    entries = []
    for number, line in enumerate(lines, start=1):
        if marker in line:
            match = pattern.match(line)
            if not match:
                sys.exit(f"capture_corpus.py: {path}:{number}: expected {pattern.pattern}, "
                         f"found {line.strip()!r}")
            entries.append(match.groups())
    if not entries:
        sys.exit(f"capture_corpus.py: {path}: no line holds {marker!r}")
    return entries


def method_tables_from_sources():
    """({(class, method): name} of every method, the set of keys the codec decodes)."""
    names = {(int(c), int(m)): name
             for c, m, name in read_entries("method_name.cpp", "{method_key(", _NAME_ENTRY)}
    mid = {name: (int(c), int(m))
           for name, c, m in read_entries("constants.hpp", "= method_key(", _MID_ENTRY)}
    decoded = set()
    for (key_name,) in read_entries("methods.hpp", "kKey = mid::", _STRUCT_KEY):
        if key_name not in mid:
            sys.exit(f"capture_corpus.py: {AMQP_SOURCES}/methods.hpp: kKey = mid::{key_name}, "
                     f"which constants.hpp does not define")
        if mid[key_name] not in names:
            sys.exit("capture_corpus.py: %s/method_name.cpp has no name for %d.%d (mid::%s)"
                     % (AMQP_SOURCES, *mid[key_name], key_name))
        decoded.add(mid[key_name])
    return names, decoded


METHOD_NAMES, DECODED_METHODS = method_tables_from_sources()

WORK_QUEUE = "nackguard.capture.work"
DEAD_LETTER_QUEUE = "nackguard.capture.dlq"
CONSUMER_TAG = "nackguard.capture.consumer"
TARGETS = ("fuzz_frame_decoder", "fuzz_methods", "fuzz_content_header", "fuzz_field_table")


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


# ---- frames ----

def split_frames(stream, from_client):
    """Returns [(type, channel, payload, raw)]; a client stream starts with the protocol header."""
    pos = 0
    if from_client:
        if not stream.startswith(PROTOCOL_HEADER):
            raise RuntimeError("client stream does not start with the AMQP 0-9-1 header")
        pos = len(PROTOCOL_HEADER)
    frames = []
    while len(stream) - pos >= 7:
        frame_type, channel, size = struct.unpack_from(">BHI", stream, pos)
        end = pos + 7 + size + 1
        if end > len(stream):
            break
        if stream[end - 1] != FRAME_END:
            raise RuntimeError("frame without its end octet at offset %d" % pos)
        frames.append((frame_type, channel, stream[pos + 7:end - 1], stream[pos:end]))
        pos = end
    return frames


def short_string(payload, pos):
    length = payload[pos]
    return pos + 1 + length


def table_at(payload, pos):
    (length,) = struct.unpack_from(">I", payload, pos)
    return payload[pos:pos + 4 + length]


def method_tables(key, payload):
    """The field tables inside a method payload, as {field name: table bytes}."""
    if key == (10, 10):
        return {"server-properties": table_at(payload, 6)}
    if key == (10, 11):
        return {"client-properties": table_at(payload, 4)}
    if key == (50, 10):
        pos = short_string(payload, 4 + 2)
        return {"arguments": table_at(payload, pos + 1)}
    if key == (60, 20):
        pos = short_string(payload, short_string(payload, 4 + 2))
        return {"arguments": table_at(payload, pos + 1)}
    return {}


def header_table(payload):
    """The headers table of a content header payload, or None."""
    (flags,) = struct.unpack_from(">H", payload, 12)
    if not flags & 0x2000:
        return None
    pos = 14
    if flags & 0x8000:
        pos = short_string(payload, pos)
    if flags & 0x4000:
        pos = short_string(payload, pos)
    return table_at(payload, pos)


class Corpus:
    """Writes distinct seeds under descriptive names, at most MAX_VARIANTS per name."""

    def __init__(self, root):
        self.root = root
        self.seen = {target: set() for target in TARGETS}
        self.variants = {}
        self.written = {target: 0 for target in TARGETS}
        self.skipped_large = 0

    def reset(self):
        for target in TARGETS:
            directory = os.path.join(self.root, target)
            os.makedirs(directory, exist_ok=True)
            for name in os.listdir(directory):
                if name.startswith(("broker-", "client-", "synthetic-")):
                    os.remove(os.path.join(directory, name))

    def add(self, target, name, data):
        data = bytes(data)
        if len(data) > MAX_SEED_BYTES:
            self.skipped_large += 1
            return
        digest = hashlib.sha256(data).digest()
        if digest in self.seen[target]:
            return
        count = self.variants.get((target, name), 0) + 1
        if count > MAX_VARIANTS:
            return
        self.seen[target].add(digest)
        self.variants[(target, name)] = count
        file_name = name + (".bin" if count == 1 else "-%d.bin" % count)
        with open(os.path.join(self.root, target, file_name), "wb") as out:
            out.write(data)
        self.written[target] += 1


def method_name(key):
    return METHOD_NAMES.get(key) or "method-%d-%d" % key


def add_stream(corpus, side, frames):
    """Seeds for one direction of one connection."""
    last_method = {}  # per channel: the method a content header or body belongs to
    for frame_type, channel, payload, raw in frames:
        if frame_type == 1:
            key = struct.unpack_from(">HH", payload)
            name = method_name(key)
            last_method[channel] = name
            corpus.add("fuzz_frame_decoder", "%s-%s" % (side, name), raw)
            if key in DECODED_METHODS:
                corpus.add("fuzz_methods", "%s-%s" % (side, name), payload)
            for field, table in method_tables(key, payload).items():
                corpus.add("fuzz_field_table", "%s-%s.%s" % (side, name, field), table)
        elif frame_type == 2:
            name = "%s-%s.content-header" % (side, last_method.get(channel, "unknown"))
            corpus.add("fuzz_frame_decoder", name, raw)
            corpus.add("fuzz_content_header", name, payload)
            table = header_table(payload)
            if table is not None:
                corpus.add("fuzz_field_table",
                           "%s-%s.headers" % (side, last_method.get(channel, "unknown")), table)
        elif frame_type == 3:
            corpus.add("fuzz_frame_decoder",
                       "%s-%s.body" % (side, last_method.get(channel, "unknown")), raw)
        elif frame_type == 8:
            corpus.add("fuzz_frame_decoder", "%s-heartbeat" % side, raw)


def add_multi_frame_streams(corpus, client_stream, broker_stream):
    """Short runs of consecutive frames, so the frame decoder starts from real sequences: the
    handshake of each side (the client's with its protocol header) and a whole delivery."""
    def cut(prefix, frames, first, count):
        data = bytearray(prefix)
        for _, _, _, raw in frames[first:first + count]:
            if len(data) + len(raw) > MAX_SEED_BYTES:
                break
            data += raw
        return data

    client_frames = split_frames(client_stream, True)
    broker_frames = split_frames(broker_stream, False)
    corpus.add("fuzz_frame_decoder", "client-stream-handshake",
               cut(PROTOCOL_HEADER, client_frames, 0, 4))
    corpus.add("fuzz_frame_decoder", "broker-stream-handshake", cut(b"", broker_frames, 0, 4))
    for index, (frame_type, _, payload, _) in enumerate(broker_frames):
        if frame_type == 1 and struct.unpack_from(">HH", payload) == (60, 60):
            (body_size,) = struct.unpack_from(">Q", broker_frames[index + 1][2], 4)
            if body_size > 4096:  # the delivery whose body spans several frames
                corpus.add("fuzz_frame_decoder", "broker-stream-deliver-multi-body",
                           cut(b"", broker_frames, index, 5))
                break


# ---- synthetic seeds: the type letters nobody on the wire sends ----

def synthetic_every_letter_table():
    def entry(name, letter, value=b""):
        return bytes([len(name)]) + name + letter + value

    nested = entry(b"deep", b"S", struct.pack(">I", 2) + b"er")
    nested_table = struct.pack(">I", len(nested)) + nested
    items = b"I" + struct.pack(">i", -1) + b"S" + struct.pack(">I", 0) + b"F" + nested_table
    body = b"".join([
        entry(b"t", b"t", b"\x01"), entry(b"b", b"b", struct.pack(">b", -128)),
        entry(b"B", b"B", b"\xff"), entry(b"s", b"s", struct.pack(">h", -2)),
        entry(b"u", b"u", struct.pack(">H", 65535)), entry(b"I", b"I", struct.pack(">i", -2**31)),
        entry(b"i", b"i", struct.pack(">I", 2**32 - 1)), entry(b"l", b"l", struct.pack(">q", -5)),
        entry(b"f", b"f", struct.pack(">f", 1.5)), entry(b"d", b"d", struct.pack(">d", -0.25)),
        entry(b"D", b"D", struct.pack(">BI", 2, 12345)),
        entry(b"S", b"S", struct.pack(">I", 4) + b"text"),
        entry(b"A", b"A", struct.pack(">I", len(items)) + items),
        entry(b"T", b"T", struct.pack(">Q", 1700000000)), entry(b"F", b"F", nested_table),
        entry(b"V", b"V"), entry(b"x", b"x", struct.pack(">I", 2) + b"\x00\xff"),
    ])
    return struct.pack(">I", len(body)) + body


def add_synthetic(corpus):
    table = synthetic_every_letter_table()
    corpus.add("fuzz_field_table", "synthetic-every-letter", table)
    header = struct.pack(">HHQH", 60, 0, 3, 0x2000) + table
    corpus.add("fuzz_content_header", "synthetic-headers-every-letter", header)
    declare = struct.pack(">HHH", 50, 10, 0) + b"\x01q" + b"\x02" + table
    corpus.add("fuzz_methods", "synthetic-queue.declare-every-letter", declare)
    frame = struct.pack(">BHI", 1, 1, len(declare)) + declare + bytes([FRAME_END])
    corpus.add("fuzz_frame_decoder", "synthetic-queue.declare-every-letter", frame)


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
