# ctest-variants: quorum rmq40 rmq40.quorum rmq43 rmq43.quorum
"""What a dead-letter says of where it failed and how often it was delivered (issue 14),
end to end against a real RabbitMQ, on classic and quorum queues of 3.10, 4.0 and 4.3.

A consumer nacks (requeue=True) a poison under max_redeliveries 2, through nackguard:

(a) with a `connection_name` client property: the dead-letter carries x-nackguard-consumer
    "<connection_name> on <this host>", x-nackguard-deliveries 3 and x-nackguard-returns 3;
(b) with a 3,500-byte connection_name: the connection works, and x-nackguard-consumer is cut
    to 255 bytes, the host name kept whole at its end. (About the longest a client can send:
    RabbitMQ refuses any frame over 4,096 bytes before connection.tune, so a start-ok with a
    10 KiB connection_name closes the connection with frame_too_large, with or without
    nackguard. The 10 KiB case is in tests/unit/session/guard_dead_letter_test.cpp.)
(c) without one: "<product> <version> on <this host>", pika's own product and version.
"""

import socket
import unittest

import pika

import redelivery_support as rs
from redelivery_support import NO_RATE_LIMITS, props

MAX_HEADER = 255


class DeadLetterHeadersTest(rs.RedeliveryTest):

    def dead_letter_of(self, tag, client_properties):
        """The headers of the dead-letter of a poison nacked by a consumer with
        `client_properties`, under max_redeliveries 2."""
        queue = self.queue_name(tag)
        proxy = self.start_guard({"q.yaml": rs.policy_yaml(queue, max_redeliveries=2,
                                                           rate=NO_RATE_LIMITS)})
        self.declare_source(proxy, queue)
        self.broker.publish(queue, [(b"poison", props(message_id=f"{tag}-poison"))])
        consumer = self.consumer(proxy, queue, lambda d: "nack",
                                 client_properties=client_properties)
        self.assertTrue(rs.poll_until([consumer], lambda: self.dlq_count(queue) == 1,
                                      timeout=20),
                        f"not dead-lettered: {consumer.delivered()} deliveries")
        self.assertEqual(consumer.delivered(), 3)
        dlq = self.broker.get_all(f"{queue}.dlq")
        self.assertEqual([m[2] for m in dlq], [b"poison"])
        headers = dlq[0][1].headers or {}
        self.assertEqual(headers.get("x-nackguard-returns"), 3)
        self.assertEqual(headers.get("x-nackguard-deliveries"), 3)
        return headers

    def dlq_count(self, queue):
        return self.broker.message_count(f"{queue}.dlq") or 0

    def test_a_connection_name_and_host(self):
        headers = self.dead_letter_of("named", {"connection_name": "orders-worker"})
        self.assertEqual(headers.get("x-nackguard-consumer"),
                         f"orders-worker on {socket.gethostname()}")

    def test_b_long_connection_name_is_cut(self):
        host = socket.gethostname()
        headers = self.dead_letter_of("long", {"connection_name": "n" * 3500})
        consumer = headers.get("x-nackguard-consumer")
        self.assertEqual(len(consumer.encode()), MAX_HEADER)
        self.assertEqual(consumer, "n" * (MAX_HEADER - len(" on ") - len(host)) + f" on {host}")

    def test_c_product_and_version_without_a_connection_name(self):
        headers = self.dead_letter_of("unnamed", None)
        self.assertEqual(headers.get("x-nackguard-consumer"),
                         f"Pika Python Client Library {pika.__version__} on {socket.gethostname()}")


if __name__ == "__main__":
    unittest.main()
