"""A small raw AMQP 0-9-1 client for the fault tests (no pika).

Self-contained on purpose (the integration tests' amqp_wire.py belongs to another suite):
frame and method encoding, a field-table encoder that can nest tables to any depth, a
blocking client (`Client`) with pipelined publisher confirms and a consumer that reads as
slowly as the test wants, and an asyncio client (`async_session`) cheap enough to run a
thousand connections from one process.

Every message body the fault tests publish starts with its id ("<id>|"), so that a delivery
can be attributed without decoding properties.
"""

import asyncio
import socket
import struct
import time

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
FRAME_END = 0xCE
FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT = 1, 2, 3, 8

CONNECTION_START = (10, 10)
CONNECTION_START_OK = (10, 11)
CONNECTION_TUNE = (10, 30)
CONNECTION_TUNE_OK = (10, 31)
CONNECTION_OPEN = (10, 40)
CONNECTION_OPEN_OK = (10, 41)
CONNECTION_CLOSE = (10, 50)
CONNECTION_CLOSE_OK = (10, 51)
CONNECTION_BLOCKED = (10, 60)
CONNECTION_UNBLOCKED = (10, 61)
CHANNEL_OPEN = (20, 10)
CHANNEL_OPEN_OK = (20, 11)
CHANNEL_CLOSE = (20, 40)
CHANNEL_CLOSE_OK = (20, 41)
QUEUE_DECLARE = (50, 10)
QUEUE_DECLARE_OK = (50, 11)
BASIC_QOS = (60, 10)
BASIC_QOS_OK = (60, 11)
BASIC_CONSUME = (60, 20)
BASIC_CONSUME_OK = (60, 21)
BASIC_PUBLISH = (60, 40)
BASIC_DELIVER = (60, 60)
BASIC_GET = (60, 70)
BASIC_GET_OK = (60, 71)
BASIC_GET_EMPTY = (60, 72)
BASIC_ACK = (60, 80)
BASIC_NACK = (60, 120)
CONFIRM_SELECT = (85, 10)
CONFIRM_SELECT_OK = (85, 11)

FLAG_HEADERS = 0x2000
FLAG_DELIVERY_MODE = 0x1000
FLAG_MESSAGE_ID = 0x0080


class PeerClosed(Exception):
    """EOF from the peer (before a whole frame, or while waiting for one)."""


class ConnectionClosedByPeer(Exception):
    """The peer sent connection.close; .code and .text hold its reply."""

    def __init__(self, code, text):
        super().__init__(f"connection.close {code} {text}")
        self.code = code
        self.text = text


# ---------------------------------------------------------------- encoding

def shortstr(value):
    if isinstance(value, str):
        value = value.encode()
    return struct.pack(">B", len(value)) + value


def longstr(value):
    if isinstance(value, str):
        value = value.encode()
    return struct.pack(">I", len(value)) + value


def field_value(value):
    if isinstance(value, bool):
        return b"t" + struct.pack(">B", int(value))
    if isinstance(value, int):
        return b"l" + struct.pack(">q", value)
    if isinstance(value, (str, bytes)):
        return b"S" + longstr(value)
    if isinstance(value, dict):
        return b"F" + table(value)
    raise TypeError(f"unsupported field value {value!r}")


def table(mapping):
    body = b"".join(shortstr(k) + field_value(v) for k, v in mapping.items())
    return struct.pack(">I", len(body)) + body


def nested_table(depth, key=b"n"):
    """A field table holding a table holding a table ... `depth` levels deep (built without
    recursion, innermost first)."""
    inner = struct.pack(">I", 0)
    for _ in range(depth - 1):
        entry = shortstr(key) + b"F" + inner
        inner = struct.pack(">I", len(entry)) + entry
    return inner


def frame(frame_type, channel, payload, end=FRAME_END):
    return struct.pack(">BHI", frame_type, channel, len(payload)) + payload + bytes([end])


def method_frame(channel, method, args=b""):
    return frame(FRAME_METHOD, channel, struct.pack(">HH", *method) + args)


def content_header(channel, body_size, message_id=None, persistent=False, headers_raw=None):
    flags = 0
    props = b""
    if headers_raw is not None:
        flags |= FLAG_HEADERS
        props += headers_raw
    if persistent:
        flags |= FLAG_DELIVERY_MODE
        props += b"\x02"
    if message_id is not None:
        flags |= FLAG_MESSAGE_ID
        props += shortstr(message_id)
    return frame(FRAME_HEADER, channel, struct.pack(">HHQH", 60, 0, body_size, flags) + props)


def body_frames(channel, body, frame_max):
    step = max(1, frame_max - 8)
    return b"".join(frame(FRAME_BODY, channel, body[i:i + step])
                    for i in range(0, len(body), step)) if body else b""


def publish_frames(channel, exchange, routing_key, body, frame_max=131072, message_id=None,
                   persistent=False, mandatory=False, headers_raw=None):
    args = struct.pack(">H", 0) + shortstr(exchange) + shortstr(routing_key) + \
        struct.pack(">B", 1 if mandatory else 0)
    return (method_frame(channel, BASIC_PUBLISH, args)
            + content_header(channel, len(body), message_id, persistent, headers_raw)
            + body_frames(channel, body, frame_max))


def start_ok(user="guest", password="guest"):
    props = {"product": "nackguard-faults raw client",
             "capabilities": {"consumer_cancel_notify": True, "connection.blocked": True,
                              "publisher_confirms": True, "basic.nack": True}}
    response = b"\x00" + user.encode() + b"\x00" + password.encode()
    return method_frame(0, CONNECTION_START_OK, table(props) + shortstr("PLAIN")
                        + longstr(response) + shortstr("en_US"))


def tune_ok(channel_max, frame_max, heartbeat):
    return method_frame(0, CONNECTION_TUNE_OK, struct.pack(">HIH", channel_max, frame_max,
                                                           heartbeat))


def connection_open(vhost="/"):
    return method_frame(0, CONNECTION_OPEN, shortstr(vhost) + shortstr("") + b"\x00")


def connection_close(code=200, text="bye"):
    return method_frame(0, CONNECTION_CLOSE, struct.pack(">H", code) + shortstr(text)
                        + struct.pack(">HH", 0, 0))


def connection_close_ok():
    return method_frame(0, CONNECTION_CLOSE_OK)


def channel_open(channel):
    return method_frame(channel, CHANNEL_OPEN, shortstr(""))


def channel_close(channel, code=200, text="bye"):
    return method_frame(channel, CHANNEL_CLOSE, struct.pack(">H", code) + shortstr(text)
                        + struct.pack(">HH", 0, 0))


def queue_declare(channel, queue, passive=False, durable=False):
    bits = (1 if passive else 0) | (2 if durable else 0)
    return method_frame(channel, QUEUE_DECLARE, struct.pack(">H", 0) + shortstr(queue)
                        + struct.pack(">B", bits) + table({}))


def basic_qos(channel, prefetch_count):
    return method_frame(channel, BASIC_QOS, struct.pack(">IHB", 0, prefetch_count, 0))


def basic_consume(channel, queue, tag="", no_ack=False):
    bits = 2 if no_ack else 0
    return method_frame(channel, BASIC_CONSUME, struct.pack(">H", 0) + shortstr(queue)
                        + shortstr(tag) + struct.pack(">B", bits) + table({}))


def basic_get(channel, queue, no_ack=False):
    return method_frame(channel, BASIC_GET, struct.pack(">H", 0) + shortstr(queue)
                        + struct.pack(">B", 1 if no_ack else 0))


def basic_ack(channel, tag, multiple=False):
    return method_frame(channel, BASIC_ACK, struct.pack(">QB", tag, 1 if multiple else 0))


def basic_nack(channel, tag, multiple=False, requeue=True):
    bits = (1 if multiple else 0) | (2 if requeue else 0)
    return method_frame(channel, BASIC_NACK, struct.pack(">QB", tag, bits))


def confirm_select(channel):
    return method_frame(channel, CONFIRM_SELECT, b"\x00")


# ---------------------------------------------------------------- decoding

class Frame:
    __slots__ = ("type", "channel", "payload")

    def __init__(self, frame_type, channel, payload):
        self.type = frame_type
        self.channel = channel
        self.payload = payload

    @property
    def method(self):
        if self.type != FRAME_METHOD or len(self.payload) < 4:
            return None
        return struct.unpack_from(">HH", self.payload, 0)

    @property
    def args(self):
        return self.payload[4:]

    def __repr__(self):
        return f"Frame(type={self.type}, ch={self.channel}, method={self.method}, " \
               f"{self.payload[:40]!r})"


def parse_close(f):
    args = f.args
    code, n = struct.unpack_from(">HB", args, 0)
    return code, args[3:3 + n].decode(errors="replace")


def parse_shortstr(buf, off):
    n = buf[off]
    return buf[off + 1:off + 1 + n].decode(errors="replace"), off + 1 + n


def message_id_of(body):
    """The id a fault test put at the start of the body ("<id>|..."), else None."""
    head, sep, _ = bytes(body[:80]).partition(b"|")
    return head.decode(errors="replace") if sep else None


def split_frames(buffer):
    """Parses whole frames off the front of a bytearray; returns (frames, bytes consumed)."""
    frames = []
    off = 0
    n = len(buffer)
    while n - off >= 8:
        frame_type, channel, size = struct.unpack_from(">BHI", buffer, off)
        if n - off < size + 8:
            break
        end = buffer[off + 7 + size]
        if end != FRAME_END:
            raise ValueError(f"bad frame end {end:#x}")
        frames.append(Frame(frame_type, channel, bytes(buffer[off + 7:off + 7 + size])))
        off += size + 8
    return frames, off


# ---------------------------------------------------------------- blocking client

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
        chunk = self.sock.recv(max_bytes)
        if not chunk:
            raise PeerClosed(f"EOF with {len(self.buffer)} bytes of a partial frame")
        self.buffer += chunk
        frames, used = split_frames(self.buffer)
        del self.buffer[:used]
        self.frames.extend(frames)

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
            code, text = parse_close(f)
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
            code, text = parse_close(f)
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
            chunk = await self.reader.read(65536)
            if not chunk:
                raise PeerClosed("EOF")
            self.buffer += chunk
            frames, used = split_frames(self.buffer)
            del self.buffer[:used]
            self.frames.extend(frames)
        return self.frames.pop(0)

    async def expect(self, method, channel=None):
        while True:
            f = await self.read_frame()
            if f.type == FRAME_HEARTBEAT:
                continue
            if f.method == method and (channel is None or f.channel == channel):
                return f
            if f.method == CONNECTION_CLOSE:
                raise ConnectionClosedByPeer(*parse_close(f))
            if f.method == CHANNEL_CLOSE:
                raise ConnectionClosedByPeer(*parse_close(f))

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
