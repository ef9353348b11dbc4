# ctest-variants: rmq40 rmq43 rmq43.quorum
"""The proxy is transparent to pika for the AMQP features beyond plain publish/consume.

Each scenario (features_scenarios.py) runs once directly against RabbitMQ and once
through the proxy; the observations (bodies, delivery tags, redelivered flags, message
counts, confirm and return results, reply codes and texts) must be identical, and each is
also checked against its exact expected value:
- publisher confirms: 1,000 publishes all confirmed; a mandatory publish to an
  unroutable key comes back as basic.return (pika UnroutableError, 312 NO_ROUTE);
- basic.get on an empty and a non-empty queue (message_count values);
- tx.select / tx.commit / tx.rollback;
- basic.cancel by the client, and a server-initiated basic.cancel when the queue is
  deleted (pika's cancel callback fires);
- 100 channels on one connection, each with its own queue;
- basic.nack and basic.reject with requeue=True, then ack (redelivered on the 2nd
  delivery); basic.recover(requeue=True); basic.qos prefetch limits;
- an exclusive queue (405 RESOURCE_LOCKED for another connection);
- a channel closed by the broker with 404 while the connection stays usable.
CTest runs the module on RabbitMQ 3.10 (integration.test_features), 4.0
(integration.test_features.rmq40) and 4.3 (.rmq43), and on quorum queues on 4.3
(.rmq43.quorum: harness.declare_queue; the exclusive queues stay classic, as a quorum queue
cannot be exclusive).
"""

import unittest

import harness
from features_scenarios import (
    MISSING_QUEUE, UNROUTABLE_KEY, basic_get, channel_404, client_cancel, confirms,
    exclusive_queue, hundred_channels, nack_reject_requeue, qos, recover, server_cancel,
    transactions)


class FeaturesTest(harness.IntegrationTest):

    def both(self, scenario, *args):
        direct, proxied = self.run_both(scenario, *args)
        self.assertSameThroughProxy(direct, proxied, scenario.__name__)
        return direct

    def test_publisher_confirms_and_mandatory_return(self):
        r = self.both(confirms)
        self.assertEqual(r["confirmed"], 1000)
        self.assertEqual(r["queued"], 1000)
        self.assertEqual(r["mandatory"], [("Basic.Return", 312, "NO_ROUTE", "", UNROUTABLE_KEY,
                                           b"returned", "r1")])
        self.assertEqual(r["queued_after"], 1001)
        self.assertTrue(r["channel_open"])

    def test_basic_get_empty_and_non_empty(self):
        r = self.both(basic_get)
        self.assertEqual(r, [
            ("empty", (None, None, None)),
            ("queued", 3),
            ("Basic.GetOk", b"g0", 1, False, 2),
            ("Basic.GetOk", b"g1", 2, False, 1),
            ("Basic.GetOk", b"g2", 3, False, 0),
            ("empty again", (None, None, None)),
            ("Basic.GetOk", b"auto", 4, 0),
            ("left", 0),
        ])

    def test_transactions_commit_and_rollback(self):
        r = self.both(transactions)
        self.assertEqual(r["before_rollback"], 0)
        self.assertEqual(r["before_commit"], 0)
        self.assertEqual(r["after_commit"], 2)
        self.assertEqual(r["delivered"], [(b"committed-1", 1, 1), (b"committed-2", 2, 0)])
        self.assertEqual(r["tx_ack"], (b"acked-in-tx", 1, 0))

    def test_client_cancel_stops_deliveries(self):
        r = self.both(client_cancel)
        self.assertEqual(r["pending"], [])
        self.assertEqual(r["deliveries"], [("k0", 1, False), ("k1", 2, False)])
        self.assertEqual(r["left"], 5)
        self.assertEqual(r["consumer_tags"], [])

    def test_server_cancel_when_queue_deleted(self):
        r = self.both(server_cancel)
        self.assertEqual(r["deliveries"], [("s0", 1, False)])
        self.assertEqual(r["queue_delete"], 0)
        self.assertEqual(len(r["cancels"]), 1, "pika's cancel callback calls")
        name, same_tag, channel_number = r["cancels"][0]
        self.assertEqual((name, same_tag), ("Basic.Cancel", True))
        self.assertTrue(r["channel_open"])
        self.assertEqual(r["after"], (b"s1", 2))

    def test_hundred_channels_on_one_connection(self):
        r = self.both(hundred_channels)
        self.assertEqual(len(r), 100)
        for n, (number, seen) in enumerate(r):
            self.assertEqual(seen, [(f"ch{n}-m{i}", i + 1, False) for i in range(3)],
                             f"channel {number}")
        self.assertEqual(sorted(number for number, _ in r), list(range(1, 101)))

    def test_nack_and_reject_with_requeue_redeliver(self):
        seen, left = self.both(nack_reject_requeue)
        self.assertEqual(seen, [("nacked", 1, False), ("nacked", 2, True),
                                ("rejected", 3, False), ("rejected", 4, True)])
        self.assertEqual(left, 0)

    def test_basic_recover_requeue(self):
        seen, left = self.both(recover)
        self.assertEqual(seen, [("r0", 1, False), ("r1", 2, False), ("r2", 3, False),
                                ("r0", 4, True), ("r1", 5, True), ("r2", 6, True)])
        self.assertEqual(left, 0)

    def test_basic_qos_limits_unacked_deliveries(self):
        steps = self.both(qos)
        self.assertEqual(steps[:5], [("prefetch 3", 3), ("ack 1", 4),
                                     ("ack up to 4, multiple", 7),
                                     ("nack up to 7, multiple", 10), ("left", 0)])
        self.assertEqual(steps[5], ("deliveries", [(f"q{i}", i + 1, False) for i in range(10)]))

    def test_exclusive_queue(self):
        r = self.both(exclusive_queue)
        locked = ("ChannelClosedByBroker", 405,
                  "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue "
                  "'<queue>' in vhost '/'. It could be originally declared on another "
                  "connection or the exclusive property value does not match that of the "
                  "original declaration.")
        self.assertEqual(r["declare"], 0)
        self.assertEqual(r["passive declare"], locked)
        self.assertEqual(r["consume"], locked)
        self.assertEqual(r["get"], locked)
        self.assertEqual(r["owner_get"], (b"mine", 1, 0))
        self.assertTrue(r["owner_closed_cleanly"], "connection.close-ok within 5 s")
        self.assertEqual(r["after_owner_closed"],
                         ("ChannelClosedByBroker", 404,
                          "NOT_FOUND - no queue '<queue>' in vhost '/'"))

    def test_channel_closed_404_connection_survives(self):
        r = self.both(channel_404)
        not_found = ("ChannelClosedByBroker", 404,
                     f"NOT_FOUND - no queue '{MISSING_QUEUE}' in vhost '/'")
        self.assertEqual(r["error"], not_found)
        self.assertEqual(r["error2"], not_found)
        self.assertTrue(r["channel_closed"])
        self.assertTrue(r["connection_open"])
        self.assertTrue(r["connection_open_2"])
        self.assertTrue(r["ch2_open"])
        self.assertEqual(r["after"], (b"still works", 1, 0))
        self.assertTrue(r["closed_cleanly"], "connection.close-ok within 5 s")


if __name__ == "__main__":
    unittest.main()
