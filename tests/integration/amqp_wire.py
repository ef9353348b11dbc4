"""Minimal raw AMQP 0-9-1 wire helpers for scripted peers (no pika).

Just enough to play either side of a connection handshake by hand and to
build deliberately malformed frames: frame encoding and a blocking frame
reader, the handful of connection/channel methods a handshake needs, and a
small field-table encoder/decoder.  Everything is explicit bytes so that the
tests control exactly what goes on the wire.
"""

import socket
import struct
import time

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
CHANNEL_OPEN = (20, 10)
CHANNEL_OPEN_OK = (20, 11)

REPLY_CONNECTION_FORCED = 320
REPLY_FRAME_ERROR = 501
REPLY_SYNTAX_ERROR = 502
REPLY_COMMAND_INVALID = 503
REPLY_CHANNEL_ERROR = 504
REPLY_UNEXPECTED_FRAME = 505


class PeerClosed(Exception):
    """The peer closed the socket (EOF) before a whole frame arrived."""

    def __init__(self, partial=b""):
        super().__init__(f"peer closed the connection (EOF) after {len(partial)} "
                         f"bytes of an incomplete frame: {partial[:64]!r}")
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


def frame(frame_type, channel, payload, end=FRAME_END):
    return struct.pack(">BHI", frame_type, channel, len(payload)) + payload + bytes([end])


def method_frame(channel, method, args=b""):
    return frame(FRAME_METHOD, channel, struct.pack(">HH", *method) + args)


def content_header_frame(channel, body_size, class_id=60, flags=0, props=b""):
    return frame(FRAME_HEADER, channel,
                 struct.pack(">HHQH", class_id, 0, body_size, flags) + props)


def body_frame(channel, body):
    return frame(FRAME_BODY, channel, body)


def heartbeat_frame():
    return frame(FRAME_HEARTBEAT, 0, b"")


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


def connection_close(reply_code, reply_text, class_id=0, method_id=0):
    return method_frame(0, CONNECTION_CLOSE, struct.pack(">H", reply_code) + shortstr(reply_text)
                        + struct.pack(">HH", class_id, method_id))


def connection_close_ok():
    return method_frame(0, CONNECTION_CLOSE_OK)


def channel_open(channel):
    return method_frame(channel, CHANNEL_OPEN, shortstr(""))


# Server side of the handshake (for the fake broker).

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
    def __init__(self, frame_type, channel, payload, end):
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
    """(reply code, reply text, class id, method id) of a connection.close."""
    args = frame_.args
    code, tlen = struct.unpack_from(">HB", args, 0)
    text = args[3:3 + tlen].decode(errors="replace")
    class_id, method_id = struct.unpack_from(">HH", args, 3 + tlen)
    return code, text, class_id, method_id


def parse_tune(frame_):
    """(channel_max, frame_max, heartbeat) of a connection.tune or tune-ok."""
    return struct.unpack_from(">HIH", frame_.args, 0)


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


class FrameReader:
    """Blocking frame reader over a socket with an overall deadline per call."""

    def __init__(self, sock):
        self.sock = sock
        self.buffer = b""

    def _fill(self, needed, deadline):
        while len(self.buffer) < needed:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise socket.timeout(f"timed out waiting for {needed} bytes, have "
                                     f"{len(self.buffer)}: {self.buffer[:64]!r}")
            self.sock.settimeout(remaining)
            chunk = self.sock.recv(65536)
            if not chunk:
                raise PeerClosed(self.buffer)
            self.buffer += chunk

    def read_exact(self, n, timeout=5.0):
        self._fill(n, time.monotonic() + timeout)
        data, self.buffer = self.buffer[:n], self.buffer[n:]
        return data

    def read_frame(self, timeout=5.0):
        deadline = time.monotonic() + timeout
        self._fill(7, deadline)
        frame_type, channel, size = struct.unpack_from(">BHI", self.buffer, 0)
        if size > 16 * 1024 * 1024:
            raise ValueError(f"implausible frame size {size} in {self.buffer[:16]!r}")
        self._fill(7 + size + 1, deadline)
        payload = self.buffer[7:7 + size]
        end = self.buffer[7 + size]
        self.buffer = self.buffer[8 + size:]
        if end != FRAME_END:
            raise ValueError(f"bad frame end {end:#x} after {payload[:32]!r}")
        return Frame(frame_type, channel, payload, end)

    def read_method(self, expected, timeout=5.0, skip_heartbeats=True):
        """Reads frames until a method frame; asserts it is `expected`."""
        deadline = time.monotonic() + timeout
        while True:
            f = self.read_frame(max(0.0, deadline - time.monotonic()))
            if skip_heartbeats and f.type == FRAME_HEARTBEAT:
                continue
            if f.method != expected:
                raise AssertionError(f"expected method {expected}, got {f!r}")
            return f

    def read_until_eof(self, timeout=5.0):
        """Returns every byte until EOF; raises socket.timeout if no EOF in time."""
        deadline = time.monotonic() + timeout
        data, self.buffer = self.buffer, b""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise socket.timeout(f"no EOF within {timeout}s; got {data[:64]!r}")
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:
                return data
            if not chunk:
                return data
            data += chunk


def client_handshake(sock, user="guest", password="guest", vhost="/", timeout=5.0,
                     properties=None):
    """Plays the client side of the handshake; returns (reader, tune tuple).

    The client accepts the server's channel_max, frame_max and heartbeat
    as offered (echoes them in tune-ok). `properties`: the client properties
    (default CLIENT_PROPERTIES), e.g. with a connection_name to find it by.
    """
    reader = FrameReader(sock)
    sock.sendall(PROTOCOL_HEADER)
    start = reader.read_method(CONNECTION_START, timeout)
    major, minor, _, mechanisms, _ = parse_start(start)
    if (major, minor) != (0, 9) or "PLAIN" not in mechanisms.split():
        raise AssertionError(f"unexpected connection.start: {(major, minor, mechanisms)}")
    sock.sendall(start_ok(user, password, properties))
    tune = parse_tune(reader.read_method(CONNECTION_TUNE, timeout))
    sock.sendall(tune_ok(*tune))
    sock.sendall(connection_open(vhost))
    reader.read_method(CONNECTION_OPEN_OK, timeout)
    return reader, tune
