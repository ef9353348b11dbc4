"""A raw AMQP client that consumes and holds chosen deliveries, for RabbitMQ 4.3's consumer
timeout (test_consumer_timeout.py): 4.3 cancels a timed-out consumer with a basic.cancel,
which pika's BlockingConnection does not survive."""

import socket
import struct
import time

import amqp_wire
import harness
import wire_reader


class HoldingClient:
    """A raw AMQP client (amqp_wire, no pika: pika's BlockingConnection fails with a KeyError
    on a broker's basic.cancel, measured with 1.x on 4.3) that consumes on numbered channels
    (prefetch 10), acks each delivery `hold(label)` is false for and keeps the others. It
    records per channel the labels acked, the (label, delivery tag) held, the broker's
    basic.cancel frames (cancelled: channel -> count) and channel closes (closed: channel ->
    (code, text)). It announces consumer_cancel_notify, as pika does."""

    def __init__(self, port):
        self.sock = socket.create_connection((harness.BROKER_HOST, port), timeout=10)
        self.reader, _ = wire_reader.client_handshake(
            self.sock, properties={"capabilities": {"consumer_cancel_notify": True}})
        self.hold, self.acked, self.holding = {}, {}, {}
        self.cancelled, self.closed = {}, {}
        self._partial = {}  # channel -> [delivery tag, body size, body so far]

    def consume(self, channel, queue, hold):
        self.hold[channel], self.acked[channel], self.holding[channel] = hold, [], []
        self.sock.sendall(amqp_wire.channel_open(channel))
        self.reader.read_method(amqp_wire.CHANNEL_OPEN_OK)
        self.sock.sendall(amqp_wire.basic_qos(channel, 10))
        self.reader.read_method(amqp_wire.BASIC_QOS_OK)
        self.sock.sendall(amqp_wire.basic_consume(channel, queue, tag=f"holding-{channel}"))

    def held(self, channel):
        return [label for label, _ in self.holding.get(channel, [])]

    def ack(self, channel, label):
        tag = next(t for lb, t in self.holding[channel] if lb == label)
        self.sock.sendall(amqp_wire.basic_ack(channel, tag))

    def close_channel(self, channel):
        self.sock.sendall(amqp_wire.channel_close(channel))
        self.pump(lambda: channel in self.closed, 10, f"channel {channel}'s close-ok")

    def pump(self, done, limit, what):
        deadline = time.monotonic() + limit
        while not done():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if what is None:
                    return
                raise AssertionError(f"{what}: not within {limit:.0f} s")
            try:
                self._handle(self.reader.read_frame(timeout=min(0.2, remaining)))
            except socket.timeout:
                pass

    def _handle(self, f):
        if f.type == amqp_wire.FRAME_METHOD:
            if f.method == amqp_wire.BASIC_DELIVER:
                tag_len = f.args[0]
                (tag,) = struct.unpack_from(">Q", f.args, 1 + tag_len)
                self._partial[f.channel] = [tag, None, b""]
            elif f.method == (60, 30):  # basic.cancel from the broker
                self.cancelled[f.channel] = self.cancelled.get(f.channel, 0) + 1
            elif f.method == amqp_wire.CHANNEL_CLOSE:
                self.closed[f.channel] = amqp_wire.parse_close(f)
                self.sock.sendall(amqp_wire.method_frame(f.channel, amqp_wire.CHANNEL_CLOSE_OK))
            elif f.method == amqp_wire.CHANNEL_CLOSE_OK:
                self.closed[f.channel] = (200, "closed by the client")
        elif f.type == amqp_wire.FRAME_HEADER and f.channel in self._partial:
            (self._partial[f.channel][1],) = struct.unpack_from(">Q", f.payload, 4)
            self._complete(f.channel)
        elif f.type == amqp_wire.FRAME_BODY and f.channel in self._partial:
            self._partial[f.channel][2] += f.payload
            self._complete(f.channel)

    def _complete(self, channel):
        tag, size, body = self._partial[channel]
        if size is None or len(body) < size:
            return
        del self._partial[channel]
        label = body.decode()
        if self.hold[channel](label):
            self.holding[channel].append((label, tag))
        else:
            self.sock.sendall(amqp_wire.basic_ack(channel, tag))
            self.acked[channel].append(label)

    def close(self):
        try:
            self.sock.sendall(amqp_wire.connection_close())
            self.reader.read_until_eof(timeout=5)
        except OSError:
            pass
        finally:
            self.sock.close()
