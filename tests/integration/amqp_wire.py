"""Raw AMQP 0-9-1 frames for scripted peers and raw clients (no pika): the one such module.

Used by the integration tests' scripted peers (peers.py, test_malformed, test_unknown_method)
and by the fault tests' raw clients (tests/faults/rawamqp.py, which imports it from here).
Everything is explicit bytes, so that a test controls exactly what goes on the wire,
deliberately malformed frames included: frame and method encoding for both sides of a
connection, a field-table encoder that can nest tables to any depth, and frame decoding.
wire_reader.py reads frames from a socket with these.
"""

import struct

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
FRAME_END = 0xCE

FRAME_METHOD = 1
FRAME_HEADER = 2
FRAME_BODY = 3
FRAME_HEARTBEAT = 8

# (class id, method id)
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

# Basic content header property flags.
FLAG_HEADERS = 0x2000
FLAG_DELIVERY_MODE = 0x1000
FLAG_MESSAGE_ID = 0x0080

REPLY_CONNECTION_FORCED = 320
REPLY_FRAME_ERROR = 501
REPLY_SYNTAX_ERROR = 502
REPLY_COMMAND_INVALID = 503
REPLY_CHANNEL_ERROR = 504
REPLY_UNEXPECTED_FRAME = 505


class PeerClosed(Exception):
    """The peer closed the socket (EOF) before a whole frame arrived, or while one was
    awaited. `partial`: the bytes of the incomplete frame."""

    def __init__(self, partial=b"", detail=None):
        super().__init__(detail or f"peer closed the connection (EOF) after {len(partial)} "
                         f"bytes of an incomplete frame: {bytes(partial[:64])!r}")
        self.partial = partial


# ---------------------------------------------------------------- encoding

def shortstr(value):
    if isinstance(value, str):
        value = value.encode()
    if len(value) > 255:
        raise ValueError("shortstr longer than 255 bytes")
    return struct.pack(">B", len(value)) + value


def longstr(value):
    if isinstance(value, str):
        value = value.encode()
    return struct.pack(">I", len(value)) + value


def field_value(value):
    if isinstance(value, bool):
        return b"t" + struct.pack(">B", 1 if value else 0)
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


def content_header_frame(channel, body_size, class_id=60, flags=0, props=b""):
    return frame(FRAME_HEADER, channel,
                 struct.pack(">HHQH", class_id, 0, body_size, flags) + props)


def content_header(channel, body_size, message_id=None, persistent=False, headers_raw=None):
    """A basic content header with the properties given (`headers_raw`: an encoded table)."""
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
    return content_header_frame(channel, body_size, flags=flags, props=props)


def body_frame(channel, body):
    return frame(FRAME_BODY, channel, body)


def body_frames(channel, body, frame_max):
    step = max(1, frame_max - 8)
    return b"".join(body_frame(channel, body[i:i + step]) for i in range(0, len(body), step))


def heartbeat_frame():
    return frame(FRAME_HEARTBEAT, 0, b"")


def publish_frames(channel, exchange, routing_key, body, frame_max=131072, message_id=None,
                   persistent=False, mandatory=False, headers_raw=None):
    args = struct.pack(">H", 0) + shortstr(exchange) + shortstr(routing_key) + \
        struct.pack(">B", 1 if mandatory else 0)
    return (method_frame(channel, BASIC_PUBLISH, args)
            + content_header(channel, len(body), message_id, persistent, headers_raw)
            + body_frames(channel, body, frame_max))


CLIENT_PROPERTIES = {
    "product": "nackguard-it raw client",
    "capabilities": {"consumer_cancel_notify": True},
}


def start_ok(user="guest", password="guest", properties=None):
    response = b"\x00" + user.encode() + b"\x00" + password.encode()
    args = (table(properties or CLIENT_PROPERTIES) + shortstr("PLAIN")
            + longstr(response) + shortstr("en_US"))
    return method_frame(0, CONNECTION_START_OK, args)


def tune_ok(channel_max, frame_max, heartbeat):
    return method_frame(0, CONNECTION_TUNE_OK,
                        struct.pack(">HIH", channel_max, frame_max, heartbeat))


def connection_open(vhost="/"):
    return method_frame(0, CONNECTION_OPEN, shortstr(vhost) + shortstr("") + b"\x00")


def _close_args(reply_code, reply_text, class_id, method_id):
    return (struct.pack(">H", reply_code) + shortstr(reply_text)
            + struct.pack(">HH", class_id, method_id))


def connection_close(reply_code=200, reply_text="bye", class_id=0, method_id=0):
    return method_frame(0, CONNECTION_CLOSE,
                        _close_args(reply_code, reply_text, class_id, method_id))


def connection_close_ok():
    return method_frame(0, CONNECTION_CLOSE_OK)


def channel_open(channel):
    return method_frame(channel, CHANNEL_OPEN, shortstr(""))


def channel_close(channel, reply_code=200, reply_text="bye"):
    return method_frame(channel, CHANNEL_CLOSE, _close_args(reply_code, reply_text, 0, 0))


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


# Server side of the handshake (for a fake broker).

SERVER_PROPERTIES = {
    "product": "nackguard-it fake broker",
    "version": "0.0.0",
    "capabilities": {
        "publisher_confirms": True,
        "consumer_cancel_notify": True,
        "basic.nack": True,
        "connection.blocked": True,
        "authentication_failure_close": True,
    },
}


def connection_start(mechanisms="PLAIN", locales="en_US", properties=None):
    args = (struct.pack(">BB", 0, 9) + table(properties or SERVER_PROPERTIES)
            + longstr(mechanisms) + longstr(locales))
    return method_frame(0, CONNECTION_START, args)


def connection_tune(channel_max, frame_max, heartbeat):
    return method_frame(0, CONNECTION_TUNE, struct.pack(">HIH", channel_max, frame_max, heartbeat))


def connection_open_ok():
    return method_frame(0, CONNECTION_OPEN_OK, shortstr(""))


# ---------------------------------------------------------------- decoding

class Frame:
    __slots__ = ("type", "channel", "payload", "end")

    def __init__(self, frame_type, channel, payload, end=FRAME_END):
        self.type = frame_type
        self.channel = channel
        self.payload = payload
        self.end = end

    @property
    def method(self):
        """(class id, method id) of a method frame, else None."""
        if self.type != FRAME_METHOD or len(self.payload) < 4:
            return None
        return struct.unpack_from(">HH", self.payload, 0)

    @property
    def args(self):
        return self.payload[4:]

    def __repr__(self):
        return (f"Frame(type={self.type}, channel={self.channel}, method={self.method}, "
                f"payload={self.payload[:48]!r}{'...' if len(self.payload) > 48 else ''})")


def parse_close(frame_):
    """(reply code, reply text, class id, method id) of a connection.close or channel.close."""
    args = frame_.args
    code, tlen = struct.unpack_from(">HB", args, 0)
    text = args[3:3 + tlen].decode(errors="replace")
    class_id, method_id = struct.unpack_from(">HH", args, 3 + tlen)
    return code, text, class_id, method_id


def parse_tune(frame_):
    """(channel_max, frame_max, heartbeat) of a connection.tune or tune-ok."""
    return struct.unpack_from(">HIH", frame_.args, 0)


def parse_shortstr(buf, off):
    """(the string at `off`, the offset after it)."""
    n = buf[off]
    return buf[off + 1:off + 1 + n].decode(errors="replace"), off + 1 + n


def parse_start(frame_):
    """(version major, minor, server properties bytes, mechanisms, locales)."""
    args = frame_.args
    major, minor = args[0], args[1]
    tlen = struct.unpack_from(">I", args, 2)[0]
    props = args[6:6 + tlen]
    off = 6 + tlen
    mlen = struct.unpack_from(">I", args, off)[0]
    mechanisms = args[off + 4:off + 4 + mlen].decode()
    off += 4 + mlen
    llen = struct.unpack_from(">I", args, off)[0]
    locales = args[off + 4:off + 4 + llen].decode()
    return major, minor, props, mechanisms, locales


def split_frames(buffer):
    """Parses whole frames off the front of a bytearray; returns (frames, bytes consumed).
    Raises ValueError on a bad frame end."""
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
