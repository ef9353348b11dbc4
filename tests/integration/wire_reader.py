"""A blocking AMQP frame reader for scripted peers, and the client side of a handshake.

Frames are built and decoded by amqp_wire; this module only reads them from a socket.
"""

import socket
import struct
import time

from amqp_wire import (CONNECTION_OPEN_OK, CONNECTION_START, CONNECTION_TUNE, FRAME_END,
                       FRAME_HEARTBEAT, PROTOCOL_HEADER, Frame, PeerClosed, connection_open,
                       parse_start, parse_tune, start_ok, tune_ok)


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
