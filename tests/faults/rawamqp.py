"""A small raw AMQP 0-9-1 client for the fault tests (no pika).

Frames are built and decoded by the integration tests' amqp_wire.py, the one module for raw
frames; its names are re-exported here, so that a fault test needs only `rawamqp`. This module
adds a blocking client (`Client`) with pipelined publisher confirms and a consumer that reads
as slowly as the test wants, and an asyncio client (`async_session`) cheap enough to run a
thousand connections from one process.

Every message body the fault tests publish starts with its id ("<id>|"), so that a delivery
can be attributed without decoding properties.
"""

import asyncio
import os
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))

import amqp_wire  # noqa: E402
from amqp_wire import *  # noqa: E402,F401,F403  (every frame name, re-exported)

# What the fault tests' raw clients call themselves: they take connection.blocked, confirms
# and nacks.
CLIENT_PROPERTIES = {"product": "nackguard-faults raw client",
                     "capabilities": {"consumer_cancel_notify": True, "connection.blocked": True,
                                      "publisher_confirms": True, "basic.nack": True}}


def start_ok(user="guest", password="guest"):
    return amqp_wire.start_ok(user, password, CLIENT_PROPERTIES)


class ConnectionClosedByPeer(Exception):
    """The peer sent connection.close; .code and .text hold its reply."""

    def __init__(self, code, text):
        super().__init__(f"connection.close {code} {text}")
        self.code = code
        self.text = text


def message_id_of(body):
    """The id a fault test put at the start of the body ("<id>|..."), else None."""
    head, sep, _ = bytes(body[:80]).partition(b"|")
    return head.decode(errors="replace") if sep else None


# ---------------------------------------------------------------- blocking client

def take_chunk(conn, chunk):
    """Bytes read on `conn` (a Client or an AsyncConn): its whole frames go to conn.frames,
    the rest waits in conn.buffer; b"" (the peer closed) raises PeerClosed."""
    if not chunk:
        raise PeerClosed(bytes(conn.buffer))
    conn.buffer += chunk
    frames, used = split_frames(conn.buffer)
    del conn.buffer[:used]
    conn.frames.extend(frames)


class Delivery:
    __slots__ = ("channel", "tag", "redelivered", "body", "size", "id")

    def __init__(self, channel, tag, redelivered):
        self.channel = channel
        self.tag = tag
        self.redelivered = redelivered
        self.body = bytearray()
        self.size = None
        self.id = None


class Client:
    """A blocking raw AMQP client. Not thread-safe; one per thread."""

    def __init__(self, port, host="127.0.0.1", timeout=10.0, rcvbuf=None):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.io_timeout = timeout
        self.sock.settimeout(timeout)
        self.sock.connect((host, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = bytearray()
        self.frames = []          # parsed, not yet handled
        self.tune = None
        self.frame_max = 131072
        self.confirmed = set()    # publish sequence numbers acked by the broker
        self.nacked = set()
        self.outstanding = set()  # sent, neither acked nor nacked yet
        self.next_seq = {}        # channel -> next publish sequence number
        self.pending = {}         # channel -> partial Delivery awaiting header/body
        self.deliveries = []      # complete deliveries not yet taken
        self.closed_by_peer = None
        self.blocked = []         # ("blocked"|"unblocked", monotonic time)

    # -- I/O
    def send(self, data):
        self.sock.settimeout(self.io_timeout)  # reads may have left a short timeout
        self.sock.sendall(data)

    def _read_some(self, timeout, max_bytes=65536):
        self.sock.settimeout(max(0.001, timeout))
        take_chunk(self, self.sock.recv(max_bytes))

    def read_frame(self, timeout=10.0):
        deadline = time.monotonic() + timeout
        while not self.frames:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise socket.timeout("no frame")
            self._read_some(remaining)
        return self.frames.pop(0)

    def expect(self, method, timeout=10.0, channel=None):
        """Handles frames until the method `method` arrives (deliveries, confirms and
        heartbeats on the way are processed); returns that frame."""
        deadline = time.monotonic() + timeout
        while True:
            f = self.read_frame(max(0.0, deadline - time.monotonic()))
            if f.method == method and (channel is None or f.channel == channel):
                return f
            self.handle(f)

    def handle(self, f):
        m = f.method
        if f.type == FRAME_HEARTBEAT:
            return
        if m == CONNECTION_CLOSE:
            code, text = parse_close(f)[:2]
            self.closed_by_peer = (code, text)
            try:
                self.send(connection_close_ok())
            except OSError:
                pass
            raise ConnectionClosedByPeer(code, text)
        if m == CONNECTION_BLOCKED:
            self.blocked.append(("blocked", time.monotonic()))
        elif m == CONNECTION_UNBLOCKED:
            self.blocked.append(("unblocked", time.monotonic()))
        elif m in (BASIC_ACK, BASIC_NACK):
            tag, bits = struct.unpack_from(">QB", f.args, 0)
            target = self.confirmed if m == BASIC_ACK else self.nacked
            if bits & 1:
                settled = [t for t in self.outstanding if t <= tag]
                self.outstanding.difference_update(settled)
                target.update(settled)
            else:
                self.outstanding.discard(tag)
                target.add(tag)
        elif m in (BASIC_DELIVER, BASIC_GET_OK):
            args = f.args
            if m == BASIC_DELIVER:
                _, off = parse_shortstr(args, 0)
            else:
                off = 0
            tag, redelivered = struct.unpack_from(">QB", args, off)
            self.pending[f.channel] = Delivery(f.channel, tag, bool(redelivered & 1))
        elif m == BASIC_GET_EMPTY:
            self.deliveries.append(None)
        elif m == CHANNEL_CLOSE:
            code, text = parse_close(f)[:2]
            raise ConnectionClosedByPeer(code, f"channel {f.channel} closed: {text}")
        elif f.type == FRAME_HEADER:
            d = self.pending.get(f.channel)
            if d is not None:
                d.size = struct.unpack_from(">Q", f.payload, 4)[0]
                if d.size == 0:
                    self._complete(d)
        elif f.type == FRAME_BODY:
            d = self.pending.get(f.channel)
            if d is not None:
                d.body += f.payload
                if len(d.body) >= d.size:
                    self._complete(d)

    def _complete(self, d):
        del self.pending[d.channel]
        d.id = message_id_of(d.body)
        d.body = bytes(d.body[:80])  # keep memory small; the id is what counts
        self.deliveries.append(d)

    def pump(self, timeout):
        """Reads and handles whatever arrives within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            while self.frames:
                self.handle(self.frames.pop(0))
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            try:
                self._read_some(remaining)
            except socket.timeout:
                return

    # -- handshake and channels
    def handshake(self, heartbeat=0, channel_max=None, timeout=10.0):
        self.send(PROTOCOL_HEADER)
        self.expect(CONNECTION_START, timeout)
        self.send(start_ok())
        tune = self.expect(CONNECTION_TUNE, timeout)
        server_channel_max, frame_max, _server_hb = struct.unpack_from(">HIH", tune.args, 0)
        self.tune = (server_channel_max, frame_max, _server_hb)
        self.frame_max = frame_max
        self.send(tune_ok(server_channel_max if channel_max is None else channel_max,
                          frame_max, heartbeat))
        self.send(connection_open())
        self.expect(CONNECTION_OPEN_OK, timeout)
        return self.tune

    def open_channel(self, channel, timeout=10.0):
        self.send(channel_open(channel))
        self.expect(CHANNEL_OPEN_OK, timeout, channel)

    def confirm_select(self, channel, timeout=10.0):
        self.send(confirm_select(channel))
        self.expect(CONFIRM_SELECT_OK, timeout, channel)
        self.next_seq[channel] = 1

    def declare(self, channel, queue, durable=True, passive=False, timeout=10.0):
        self.send(queue_declare(channel, queue, passive=passive, durable=durable))
        ok = self.expect(QUEUE_DECLARE_OK, timeout, channel)
        _, off = parse_shortstr(ok.args, 0)
        return struct.unpack_from(">II", ok.args, off)  # (message count, consumer count)

    def publish(self, channel, routing_key, body, message_id=None, persistent=True,
                exchange=""):
        """Sends one publish; returns its confirm sequence number (0 without confirms)."""
        self.send(publish_frames(channel, exchange, routing_key, body, self.frame_max,
                                 message_id, persistent))
        seq = self.next_seq.get(channel, 0)
        if seq:
            self.next_seq[channel] = seq + 1
            self.outstanding.add(seq)
        return seq

    def wait_confirms(self, up_to, timeout=30.0):
        deadline = time.monotonic() + timeout
        while len(self.confirmed) + len(self.nacked) < up_to:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self.pump(min(0.5, remaining))
        return True

    def close(self, timeout=5.0):
        try:
            self.send(connection_close())
            self.expect(CONNECTION_CLOSE_OK, timeout)
        except (OSError, PeerClosed, ConnectionClosedByPeer, socket.timeout):
            pass
        finally:
            self.sock.close()

    def abort(self):
        try:
            self.sock.close()
        except OSError:
            pass


# ---------------------------------------------------------------- asyncio client

class AsyncConn:
    """The client side of one connection over asyncio streams (for many connections)."""

    def __init__(self, reader, writer):
        self.reader = reader
        self.writer = writer
        self.buffer = bytearray()
        self.frames = []
        self.frame_max = 131072

    async def read_frame(self):
        while not self.frames:
            take_chunk(self, await self.reader.read(65536))
        return self.frames.pop(0)

    async def expect(self, method, channel=None):
        while True:
            f = await self.read_frame()
            if f.type == FRAME_HEARTBEAT:
                continue
            if f.method == method and (channel is None or f.channel == channel):
                return f
            if f.method == CONNECTION_CLOSE:
                raise ConnectionClosedByPeer(*parse_close(f)[:2])
            if f.method == CHANNEL_CLOSE:
                raise ConnectionClosedByPeer(*parse_close(f)[:2])

    async def send(self, data):
        self.writer.write(data)
        await self.writer.drain()


async def async_session(port, work, host="127.0.0.1"):
    """Connects, performs the handshake, awaits work(conn) and closes cleanly.

    Returns work's result. Raises on any failure (the caller counts them)."""
    reader, writer = await asyncio.open_connection(host, port)
    conn = AsyncConn(reader, writer)
    try:
        await conn.send(PROTOCOL_HEADER)
        await conn.expect(CONNECTION_START)
        await conn.send(start_ok())
        tune = await conn.expect(CONNECTION_TUNE)
        channel_max, frame_max, _ = struct.unpack_from(">HIH", tune.args, 0)
        conn.frame_max = frame_max
        await conn.send(tune_ok(channel_max, frame_max, 0) + connection_open())
        await conn.expect(CONNECTION_OPEN_OK)
        result = await work(conn)
        await conn.send(connection_close())
        await conn.expect(CONNECTION_CLOSE_OK)
        return result
    finally:
        writer.close()
        try:
            await writer.wait_closed()
        except OSError:
            pass
