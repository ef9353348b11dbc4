"""Helpers for test_client_edges.py (issue 38): a polling pika client whose basic.get must be
answered within a bound, and a raw client's connection.close (amqp_wire, wire_reader).

  NoAnswer      a basic.get, or the end of a connection, that did not come within its bound
  GetPoller     a pika BlockingConnection that polls a queue with basic_get(auto_ack=False);
                get() fails with NoAnswer when neither basic.get-ok nor basic.get-empty comes
                within `answer_timeout` (pika itself would wait for ever); crash() drops its
                socket without a close, as a killed process does
  raw_close()   a raw client: the handshake, connection.close, connection.close-ok
  eof_after()   how long until the peer ends a socket (select.poll, with a deadline)
  wait_for()    polls a predicate until it holds or a timeout passes
"""

import select
import socket
import threading
import time

import pika.exceptions

import amqp_wire as aw
import harness
import wire_reader
from waiting import wait_for  # noqa: F401  (re-exported: the tests say ces.wait_for)


class NoAnswer(AssertionError):
    pass


class GetPoller:
    """A client that polls `queue` with basic.get through `port`, settling by hand."""

    def __init__(self, port, queue, answer_timeout=5.0):
        self.queue = queue
        self.answer_timeout = answer_timeout
        self.conn = harness.connect(port)
        self.ch = self.conn.channel()
        self.gets = 0
        self.empties = 0
        self.slowest = 0.0  # seconds, the longest wait for an answer

    def get(self):
        """One basic.get: (method, properties, body), or None for basic.get-empty. Raises
        NoAnswer when no answer comes within answer_timeout: a timer shuts the socket down
        under pika's wait, which has no limit of its own."""
        sock = harness._connection_socket(self.conn)
        expired = threading.Event()

        def expire():
            expired.set()
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

        timer = threading.Timer(self.answer_timeout, expire)
        timer.daemon = True
        self.gets += 1
        start = time.monotonic()
        timer.start()
        try:
            method, props, body = self.ch.basic_get(self.queue, auto_ack=False)
        except pika.exceptions.AMQPError as exc:
            if expired.is_set():
                raise NoAnswer(f"basic.get #{self.gets} on {self.queue} got no answer (neither "
                               f"get-ok nor get-empty) within {self.answer_timeout:.0f} s "
                               f"({self.empties} empty answers before)") from exc
            raise
        finally:
            timer.cancel()
        waited = time.monotonic() - start
        self.slowest = max(self.slowest, waited)
        if expired.is_set():  # answered just as the timer fired: too late all the same
            raise NoAnswer(f"basic.get #{self.gets} answered only after {waited:.1f} s")
        if method is None:
            self.empties += 1
            return None
        return method, props, body

    def pause(self, seconds=0.02):
        """The polling client's pause after an empty answer (pika's I/O keeps running)."""
        self.conn.process_data_events(time_limit=seconds)

    def crash(self):
        """Ends the connection as a killed process would: no close frame, the socket shut."""
        sock = harness._connection_socket(self.conn)
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self.conn.process_data_events(time_limit=0)
        except pika.exceptions.AMQPError:
            pass  # pika notices the end of its socket

    def close(self):
        if self.conn.is_open:
            harness.close_connection(self.conn)


def raw_close(port, name="nackguard-it client-edges"):
    """Connects to `port` with a raw client, plays the handshake, sends connection.close and
    reads connection.close-ok. Returns (socket, FrameReader, monotonic time of the close-ok)."""
    sock = socket.create_connection((harness.BROKER_HOST, port), timeout=5)
    properties = dict(aw.CLIENT_PROPERTIES, connection_name=name)
    reader, _tune = wire_reader.client_handshake(sock, properties=properties)
    sock.sendall(aw.connection_close(200, "client closes"))
    reader.read_method(aw.CONNECTION_CLOSE_OK, timeout=5)
    return sock, reader, time.monotonic()


def eof_after(sock, reader, timeout):
    """Waits with select.poll, `timeout` s at most, for the peer to end the socket (EOF or a
    reset). Returns (the monotonic time it ended, or None if it stayed open; [the frames read
    meanwhile])."""
    frames, _ = aw.split_frames(bytearray(reader.buffer))
    reader.buffer = b""
    poller = select.poll()
    poller.register(sock, select.POLLIN | select.POLLRDHUP)
    start = time.monotonic()
    pending = bytearray()
    while True:
        remaining = start + timeout - time.monotonic()
        if remaining <= 0:
            return None, frames
        if not poller.poll(max(1, int(remaining * 1000))):
            continue
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            return time.monotonic(), frames
        pending += chunk
        more, used = aw.split_frames(pending)
        del pending[:used]
        frames += more
