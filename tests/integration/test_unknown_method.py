# ctest-variants: rmq40 rmq43 rmq43.quorum
"""A method AMQP 0-9-1 does not have, from a client, is refused by nackguard (issue 12, item 5).

Forwarded, such a method crashes RabbitMQ 3.10's connection process, and the client gets
320 CONNECTION_FORCED with no cause. Through the proxy, a scripted raw client (amqp_wire,
no pika) that completed the handshake and opened channel 1, then sends
  - basic method 999 (class 60) on channel 1, or
  - class 200 method 1 on channel 0,
gets connection.close 540 NOT_IMPLEMENTED on channel 0, naming the class and method ids in
its text and in its class-id and method-id fields, then EOF within 5 s after its close-ok.
The broker never sees the method: the proxy closes the upstream connection with an ordinary
connection.close, and the broker's list of connections holds none with the client's
connection_name within 5 s. A pika connection opened before the cases still works after
them, a fresh one too, and the proxy process is alive.
"""

import socket
import time
import unittest
import uuid

import amqp_wire as wire
import wire_reader
import harness
from test_heartbeat import broker_connections
from waiting import wait_for

EOF_WITHIN = 5.0
NOT_IMPLEMENTED = 540
CASES = {
    "basic.999 on channel 1": (1, 60, 999),
    "class 200 on channel 0": (0, 200, 1),
}




class UnknownMethodTest(harness.IntegrationTest):

    def unknown_method(self, channel, class_id, method_id):
        """Handshake, channel.open 1, the unknown method; what came back, and whether the
        broker had the upstream connection before and still has it after."""
        name = f"nackguard-it-unknown-{uuid.uuid4().hex[:8]}"
        props = dict(wire.CLIENT_PROPERTIES, connection_name=name)
        out = {}
        with socket.create_connection((harness.BROKER_HOST, self.proxy_port), timeout=5) as sock:
            reader, _ = wire_reader.client_handshake(sock, properties=props)
            sock.sendall(wire.channel_open(1))
            reader.read_method(wire.CHANNEL_OPEN_OK)
            out["upstream_before"] = wait_for(lambda: len(broker_connections(name)) == 1, 10)
            sock.sendall(wire.method_frame(channel, (class_id, method_id), b"\x00\x00\x00\x00"))
            frame = reader.read_frame(EOF_WITHIN)
            while frame.type == wire.FRAME_HEARTBEAT:
                frame = reader.read_frame(EOF_WITHIN)
            out["frame"] = (frame.type, frame.channel, frame.method)
            if frame.method == wire.CONNECTION_CLOSE:
                out["close"] = wire.parse_close(frame)
                sock.sendall(wire.connection_close_ok())
            start = time.monotonic()
            out["after"] = reader.read_until_eof(EOF_WITHIN)
            out["eof_seconds"] = time.monotonic() - start
        out["upstream_gone"] = wait_for(lambda: broker_connections(name) == [], 5)
        return out

    def test_unknown_methods_get_540_and_the_upstream_is_closed(self):
        self.require_proxy()
        with harness.unique_queue("unknown-method") as queue:
            bystander = harness.connect(self.proxy_port)
            try:
                bystander_ch = bystander.channel()
                harness.declare_queue(bystander_ch, queue)
                for case, (channel, class_id, method_id) in CASES.items():
                    with self.subTest(case=case):
                        out = self.unknown_method(channel, class_id, method_id)
                        self.assertTrue(out["upstream_before"], "no upstream connection seen")
                        self.assertEqual(out["frame"], (wire.FRAME_METHOD, 0,
                                                         wire.CONNECTION_CLOSE), out)
                        code, text, close_class, close_method = out["close"]
                        self.assertEqual(code, NOT_IMPLEMENTED, text)
                        self.assertEqual(
                            text, f"NOT_IMPLEMENTED - nackguard: unknown method (class "
                                  f"{class_id}, method {method_id}) on channel {channel}; "
                                  f"AMQP 0-9-1 has no such method")
                        self.assertEqual((close_class, close_method), (class_id, method_id))
                        self.assertEqual(out["after"], b"", "bytes after connection.close")
                        self.assertLess(out["eof_seconds"], EOF_WITHIN)
                        self.assertTrue(out["upstream_gone"],
                                        "the broker still has the upstream connection")
                # The bystander's connection and a fresh one still work.
                bystander_ch.basic_publish("", queue, b"still works")
                self.assertEqual(harness.wait_message_count(bystander_ch, queue, 1), 1)
                fresh = harness.connect(self.proxy_port)
                try:
                    method, _, body = fresh.channel().basic_get(queue, auto_ack=True)
                    self.assertEqual(body, b"still works")
                finally:
                    harness.close_connection(fresh)
            finally:
                self.assertTrue(harness.close_connection(bystander),
                                "the bystander's connection did not close cleanly")
        self.assertTrue(self.shared_proxy.alive())


if __name__ == "__main__":
    unittest.main()
