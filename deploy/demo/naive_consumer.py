#!/usr/bin/env python3
"""The demo's consumer: deliberately naive. It requeues every message it fails on, with
basic.nack(requeue=True), the way many consumers do. Without nackguard, one poison message
loops for ever, thousands of times a second; through nackguard it is dead-lettered to
demo.tasks.dlq after the policy's max_redeliveries.

A message "fails" when its body contains the word "poison". Nothing else is special: this
consumer knows nothing about nackguard, it is only pointed at it (AMQP_URL).

Environment: AMQP_URL (default amqp://guest:guest@nackguard:5673/%2F), QUEUE (demo.tasks).
"""

import logging
import os
import time

import pika

URL = os.environ.get("AMQP_URL", "amqp://guest:guest@nackguard:5673/%2F")
QUEUE = os.environ.get("QUEUE", "demo.tasks")

log = logging.getLogger("naive-consumer")


def handle(channel, method, properties, body):
    text = body.decode(errors="replace")
    try:
        if "poison" in text:
            raise ValueError(f"cannot process {text!r}")
        log.info("processed %s", text)
        channel.basic_ack(method.delivery_tag)
    except Exception as exc:  # the naive part: every failure goes straight back to the queue
        log.warning("failed (%s), requeueing (redelivered=%s)", exc, method.redelivered)
        channel.basic_nack(method.delivery_tag, requeue=True)


def main():
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    while True:
        try:
            connection = pika.BlockingConnection(pika.URLParameters(URL))
            channel = connection.channel()
            channel.queue_declare(QUEUE, durable=True)
            channel.basic_qos(prefetch_count=10)
            channel.basic_consume(QUEUE, handle)
            log.info("consuming %s through %s", QUEUE, URL.split("@")[-1])
            channel.start_consuming()
        except pika.exceptions.AMQPConnectionError as exc:
            log.warning("cannot connect to %s (%r); retrying in 2 s", URL.split("@")[-1], exc)
            time.sleep(2)


if __name__ == "__main__":
    main()
