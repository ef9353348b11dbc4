#!/usr/bin/python3
"""The experiment "one poison message among 100", directly against RabbitMQ and through nackguard.

One pika consumer, prefetch 10, acks the 99 good messages and answers the poison with
basic.nack(requeue=true) every time, for a fixed time. Prints a Markdown table row per target.

    /usr/bin/python3 tests/experiments/poison_among_100.py --direct 5672 --proxy 5673 [--seconds 3]

The proxy must run with a policy for the queue "poison-experiment" (max_redeliveries 5 in
docs/poison-experiment.md).
"""
import argparse
import collections
import time

import pika

QUEUE = "poison-experiment"


def run(port, seconds, mode):
    params = pika.ConnectionParameters("127.0.0.1", port)
    connection = pika.BlockingConnection(params)
    channel = connection.channel()
    channel.queue_delete(QUEUE)
    channel.queue_delete(QUEUE + ".dlq")
    channel.queue_declare(QUEUE)
    for i in range(100):
        body = b"poison" if i == 50 else b"good %d" % i
        channel.basic_publish("", QUEUE, body, pika.BasicProperties(message_id="m%d" % i))
    channel.basic_qos(prefetch_count=10)
    deliveries = collections.Counter()
    start = time.monotonic()
    for method, _, body in channel.consume(QUEUE, inactivity_timeout=1):
        if method is None or time.monotonic() - start > seconds:
            break
        deliveries[body] += 1
        if body == b"poison":
            if mode == "reject":
                channel.basic_reject(method.delivery_tag, requeue=True)
            else:
                channel.basic_nack(method.delivery_tag, requeue=True)
        else:
            channel.basic_ack(method.delivery_tag)
    channel.cancel()
    good = sum(1 for body in deliveries if body != b"poison")
    try:
        dlq = channel.queue_declare(QUEUE + ".dlq", passive=True).method.message_count
    except pika.exceptions.ChannelClosedByBroker:
        channel = connection.channel()
        dlq = 0
    left = channel.queue_declare(QUEUE, passive=True).method.message_count
    channel.queue_delete(QUEUE)
    channel.queue_delete(QUEUE + ".dlq")
    connection.close()
    return deliveries[b"poison"], good, dlq, left


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--direct", type=int, required=True, help="the broker's AMQP port")
    parser.add_argument("--proxy", type=int, required=True, help="nackguard's listen port")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--mode", choices=["nack", "reject"], default="nack")
    args = parser.parse_args()
    print("| target | poison deliveries | good messages acked | in `%s.dlq` | left in queue |" % QUEUE)
    print("|---|---|---|---|---|")
    for name, port in (("RabbitMQ directly", args.direct), ("through nackguard", args.proxy)):
        poison, good, dlq, left = run(port, args.seconds, args.mode)
        print("| %s | %d | %d | %d | %d |" % (name, poison, good, dlq, left))


if __name__ == "__main__":
    main()
