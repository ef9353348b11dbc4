# ctest-variants: rmq43 rmq43.quorum
"""Malformed peers are refused cleanly, and the channel_max rewrite is visible.

Scripted raw-socket peers (no pika), each ending in a clean close:
- a CLIENT with a wrong protocol header gets the 8 bytes "AMQP\\0\\0\\x09\\x01" and EOF;
- a CLIENT that completed the handshake (and opened channel 1) and then sends a
  frame with a bad end octet, a frame over the negotiated frame_max (announced by
  its header, and complete), an unknown frame type, a content body or a content
  header with no basic.publish before it, or garbage, gets a connection.close on
  channel 0 with reply code 501 FRAME_ERROR (frame-level errors) or 505
  UNEXPECTED_FRAME (a well-formed frame out of place) and then EOF within 5 s; a
  truncated frame followed by a half-close gets EOF within 5 s.  RabbitMQ itself
  answers each case with exactly these codes (the direct leg), except the complete
  oversize frame, which RabbitMQ answers with 501 or 505 depending on how the
  bytes arrive; the proxy must answer 501.  A pika connection opened before the
  cases and a fresh one afterwards still work: other clients are unaffected;
- a scripted BROKER (a fake upstream) that (a) answers the protocol header with
  garbage: the client sees EOF within 5 s and the proxy keeps running; (b) plays a
  correct handshake and then sends a frame with a bad end octet: the fake broker
  gets connection.close 501 from the proxy, and pika's connection through the
  proxy is closed within 5 s (ConnectionClosedByBroker 320, or the stream lost).
- channel_max: the connection.tune a client sees through the proxy offers one
  channel less than the broker's (2046 for RabbitMQ's 2047); directly it is 2047.
"""

import concurrent.futures
import socket
import struct
import threading
import time
import unittest

import pika.exceptions

import amqp_wire as wire
import wire_reader
import harness
import peers
import waiting

EOF_WITHIN = 5.0
REFUSAL = b"AMQP\x00\x00\x09\x01"
# RabbitMQ 4.x also speaks AMQP 1.0: to a header that is no AMQP one at all it answers with
# AMQP 1.0's SASL header (measured on 4.3.6). nackguard speaks 0-9-1 only and answers every
# bad header with 0-9-1's.
AMQP10_SASL = b"AMQP\x03\x01\x00\x00"


def refusal_of(target, header_name):
    if target.name == "direct" and harness.RABBITMQ_VERSION != "3.10" and header_name == "http":
        return AMQP10_SASL
    return REFUSAL
BAD_HEADERS = {
    "amqp-0-9-0": b"AMQP\x00\x00\x09\x00",
    "http": b"GET / HTTP/1.1\r\n\r\n",
}


def basic_qos_frame(channel=1):
    return wire.method_frame(channel, (60, 10), struct.pack(">IHB", 0, 10, 0))


def with_bad_end(frame_bytes):
    return frame_bytes[:-1] + b"\x00"


def oversize_payload(tune):
    """A payload larger than the negotiated frame_max.

    frame_max counts the 8 framing octets too, but RabbitMQ tolerates payloads up
    to frame_max itself (rabbit_reader's FRAME_SIZE_FUDGE), so a proxy that
    accepts what the broker accepts may too: frame_max + 1 is over both limits.
    """
    return tune[1] + 1


# name -> (bytes to send given the tune tuple, expected reply code per target,
#          half-close after sending)
FRAME_CASES = {
    "bad end octet": (lambda tune: with_bad_end(basic_qos_frame()),
                      {"direct": {501}, "proxy": {501}}, False),
    "oversize frame (header only)": (
        lambda tune: struct.pack(">BHI", wire.FRAME_METHOD, 1, oversize_payload(tune))
        + b"\x00" * 100,
        {"direct": {501}, "proxy": {501}}, False),
    # RabbitMQ checks the size only when the frame arrives in pieces: 501 or 505.
    "oversize frame (complete)": (
        lambda tune: wire.body_frame(1, b"\x00" * oversize_payload(tune)),
        {"direct": {501, 505}, "proxy": {501}}, False),
    "unknown frame type 7": (lambda tune: wire.frame(7, 1, b"abc"),
                             {"direct": {501}, "proxy": {501}}, False),
    "content body without publish": (lambda tune: wire.body_frame(1, b"hello"),
                                     {"direct": {505}, "proxy": {505}}, False),
    "content header without method": (lambda tune: wire.content_header_frame(1, 5),
                                      {"direct": {505}, "proxy": {505}}, False),
    "garbage": (lambda tune: b"\xde\xad\xbe\xef" * 8,
                {"direct": {501}, "proxy": {501}}, False),
    "truncated frame, then half-close": (lambda tune: basic_qos_frame()[:6],
                                         None, True),
}


def raw_connect(port):
    return socket.create_connection((harness.BROKER_HOST, port), timeout=5)


def refused_header(port, header):
    """Sends a bad protocol header; returns (bytes received until EOF, seconds)."""
    with raw_connect(port) as sock:
        start = time.monotonic()
        sock.sendall(header)
        data = wire_reader.FrameReader(sock).read_until_eof(EOF_WITHIN)
        return data, time.monotonic() - start


def malformed_frame(port, send, half_close):
    """Handshake, channel.open 1, then the malformed bytes; returns what came back."""
    out = {"close": None, "eof": False, "error": None}
    with raw_connect(port) as sock:
        reader, tune = wire_reader.client_handshake(sock)
        sock.sendall(wire.channel_open(1))
        reader.read_method(wire.CHANNEL_OPEN_OK)
        start = time.monotonic()
        try:
            sock.sendall(send(tune))
            if half_close:
                sock.shutdown(socket.SHUT_WR)
        except OSError as exc:  # the peer may close before reading everything
            out["send_error"] = repr(exc)
        try:
            if not half_close:
                frame = reader.read_frame(EOF_WITHIN)
                while frame.type == wire.FRAME_HEARTBEAT:
                    frame = reader.read_frame(EOF_WITHIN)
                out["frame"] = repr(frame)
                if frame.channel == 0 and frame.method == wire.CONNECTION_CLOSE:
                    out["close"] = wire.parse_close(frame)
                    try:
                        sock.sendall(wire.connection_close_ok())
                    except OSError:
                        pass
            out["after"] = reader.read_until_eof(EOF_WITHIN - (time.monotonic() - start))
            out["eof"] = True
        except wire.PeerClosed as exc:
            out["error"] = f"EOF before a whole frame: {exc}"
            out["eof"] = True
        except (OSError, ValueError, AssertionError) as exc:
            out["error"] = f"{type(exc).__name__}: {exc}"
        out["seconds"] = time.monotonic() - start
    return out


def pika_works(port, queue):
    conn = harness.connect(port)
    try:
        ch = conn.channel()
        harness.declare_queue(ch, queue)
        ch.basic_publish("", queue, b"still works")
        return harness.get_message(ch, queue)[2]
    finally:
        harness.close_connection(conn)


class MalformedClientTest(harness.IntegrationTest):

    def test_wrong_protocol_header_is_refused(self):
        for target in self.targets():
            for name, header in BAD_HEADERS.items():
                with self.subTest(target=target.name, header=name):
                    data, seconds = refused_header(target.port, header)
                    self.assertEqual(data, refusal_of(target, name))
                    self.assertLess(seconds, EOF_WITHIN)
        with harness.unique_queue("after-bad-header") as queue:
            self.assertEqual(pika_works(self.proxy_port, queue), b"still works")

    def test_malformed_frames_get_connection_close_and_eof(self):
        with harness.unique_queue("bystander") as queue:
            # a bystander connected through the proxy all along
            bystander = harness.connect(self.proxy_port)
            self.addCleanup(harness.close_connection, bystander)
            bch = bystander.channel()
            harness.declare_queue(bch, queue)

            jobs = {}
            with concurrent.futures.ThreadPoolExecutor(max_workers=2 * len(FRAME_CASES)) as pool:
                for target in self.targets():
                    for name, (send, _, half_close) in FRAME_CASES.items():
                        jobs[(target.name, name)] = pool.submit(
                            malformed_frame, target.port, send, half_close)
                # keep the bystander's connection serviced meanwhile
                while not all(job.done() for job in jobs.values()):
                    bystander.process_data_events(time_limit=0.05)

            for (target, name), job in jobs.items():
                out = job.result()
                _, expected, _ = FRAME_CASES[name]
                with self.subTest(target=target, case=name):
                    self.assertTrue(out["eof"], f"no EOF within {EOF_WITHIN}s: {out}")
                    self.assertLess(out["seconds"], EOF_WITHIN + 0.5, out)
                    if expected is None:
                        continue
                    self.assertIsNone(out["error"], out)
                    self.assertIsNotNone(out["close"],
                                         f"expected connection.close on channel 0: {out}")
                    code = out["close"][0]
                    # without a proxy both legs talk to RabbitMQ
                    leg = "direct" if harness.DIRECT_ONLY else target
                    self.assertIn(code, expected[leg], f"reply code: {out['close']}")
                    self.assertEqual(out["after"], b"", f"bytes after connection.close: {out}")

            bch.basic_publish("", queue, b"bystander")
            self.assertEqual(harness.wait_message_count(bch, queue, 1), 1)
            method, _, body = bch.basic_get(queue, auto_ack=True)
            self.assertEqual(body, b"bystander")
            self.assertTrue(bystander.is_open)
            self.assertTrue(harness.close_connection(bystander))
            self.assertEqual(pika_works(self.proxy_port, queue), b"still works")

    def test_channel_max_rewrite(self):
        tunes = {}
        pika_channel_max = {}
        for target in self.targets():
            with raw_connect(target.port) as sock:
                reader, tunes[target.name] = wire_reader.client_handshake(sock)
                sock.sendall(wire.connection_close(200, "bye"))
                reader.read_method(wire.CONNECTION_CLOSE_OK)
            conn = harness.connect(target.port)
            pika_channel_max[target.name] = conn._impl.params.channel_max
            harness.close_connection(conn)
        channel_max, frame_max, heartbeat = tunes["direct"]
        self.assertEqual(channel_max, 2047, "RabbitMQ's default channel_max")
        self.assertEqual(pika_channel_max["direct"], 2047)
        if harness.DIRECT_ONLY:
            self.skipTest("checked directly only; the rewrite needs the proxy")
        self.assertEqual(tunes["proxy"], (channel_max - 1, frame_max, heartbeat))
        self.assertEqual(pika_channel_max["proxy"], 2046)


GARBAGE = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"


class MalformedBrokerTest(harness.IntegrationTest):
    """A scripted upstream; these tests start their own proxy in front of it."""

    wants_shared_proxy = False

    def fake_broker(self, script):
        fake = peers.FakeBroker(script)
        self.addCleanup(fake.stop)
        return fake

    def test_garbage_instead_of_connection_start(self):
        self.require_proxy()

        def script(conn):
            if not conn.read_protocol_header():
                return
            conn.sock.sendall(GARBAGE)
            conn.event("garbage_sent")
            conn.event("eof", conn.reader.read_until_eof(10))

        fake = self.fake_broker(script)
        proxy = self.start_proxy(fake.port, name="garbage-broker-proxy")
        for attempt in range(2):
            with self.subTest(attempt=attempt):
                with raw_connect(proxy.port) as sock:
                    start = time.monotonic()
                    sock.sendall(wire.PROTOCOL_HEADER)
                    data = wire_reader.FrameReader(sock).read_until_eof(EOF_WITHIN)
                    seconds = time.monotonic() - start
                self.assertEqual(data, b"", "the client got bytes although the broker never "
                                            "sent connection.start")
                self.assertLess(seconds, EOF_WITHIN)
                self.assertTrue(proxy.alive(), "the proxy exited")
                self.assertTrue(waiting.wait_for(
                    lambda: len(fake.amqp_connections()) == attempt + 1
                    and fake.amqp_connections()[-1].has("eof"), EOF_WITHIN),
                    "the proxy did not close its upstream connection")
                upstream = fake.amqp_connections()[-1]
                self.assertEqual(upstream.detail("protocol_header"), wire.PROTOCOL_HEADER)
                self.assertIsNone(upstream.error)
        self.assertTrue(harness.wait_for_port(proxy.port, 2), "the proxy stopped listening")

    def test_bad_frame_from_broker_after_handshake(self):
        trigger = threading.Event()
        bad_frame = with_bad_end(wire.method_frame(0, (10, 60), wire.shortstr("low memory")))

        def script(conn):
            if not conn.read_protocol_header():
                return
            peers.play_server_handshake(conn, channel_max=2047, frame_max=131072, heartbeat=0)
            if not trigger.wait(30):
                return
            conn.sock.sendall(bad_frame)
            conn.event("bad_frame_sent")
            try:
                close = conn.reader.read_method(wire.CONNECTION_CLOSE, EOF_WITHIN)
            except wire.PeerClosed:
                conn.event("eof_without_close")
                return
            conn.event("close", wire.parse_close(close))
            conn.sock.sendall(wire.connection_close_ok())
            conn.event("eof", conn.reader.read_until_eof(EOF_WITHIN))

        fake = self.fake_broker(script)
        port = fake.port if harness.DIRECT_ONLY else \
            self.start_proxy(fake.port, name="bad-frame-broker-proxy").port
        conn = harness.connect(port)
        self.addCleanup(harness.close_connection, conn)
        self.assertTrue(conn.is_open)
        upstream = fake.amqp_connections()
        self.assertEqual(len(upstream), 1, "one AMQP connection reached the fake broker")
        upstream = upstream[0]
        self.assertEqual(upstream.detail("protocol_header"), wire.PROTOCOL_HEADER)

        trigger.set()
        error, seconds = waiting.connection_failure(
            conn, pika.exceptions.AMQPConnectionError, EOF_WITHIN + 1)
        self.assertIsNotNone(error, f"pika's connection still open after {seconds:.1f}s")
        self.assertLess(seconds, EOF_WITHIN)
        self.assertIsInstance(error, (pika.exceptions.ConnectionClosedByBroker,
                                      pika.exceptions.StreamLostError), repr(error))
        if isinstance(error, pika.exceptions.ConnectionClosedByBroker):
            self.assertEqual(error.reply_code, 320, repr(error))
        if harness.DIRECT_ONLY:
            self.skipTest("pika against the fake broker directly works; the connection.close "
                          "501 to the broker needs the proxy")
        self.assertTrue(waiting.wait_for(lambda: upstream.done.is_set(), EOF_WITHIN),
                        f"fake broker's script did not finish: {upstream.events}")
        self.assertIsNone(upstream.error)
        self.assertFalse(upstream.has("eof_without_close"),
                         "the proxy closed its upstream without connection.close")
        code, text, _, _ = upstream.detail("close")
        self.assertEqual(code, 501, f"connection.close to the broker: {code} {text}")
        self.assertTrue(upstream.has("eof"))
        self.assertEqual(upstream.detail("eof"), b"", "bytes after connection.close")


if __name__ == "__main__":
    unittest.main()
