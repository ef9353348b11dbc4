#!/usr/bin/env python3
"""The demo's publisher: one message a second to demo.tasks, straight to RabbitMQ, and every
POISON_EVERY-th one a poison message that the naive consumer can never process.

Environment: AMQP_URL (default amqp://guest:guest@rabbitmq:5672/%2F), QUEUE (demo.tasks),
POISON_EVERY (30), INTERVAL (seconds, 1).
"""

import logging
import os
import time
import uuid

import pika

URL = os.environ.get("AMQP_URL", "amqp://guest:guest@rabbitmq:5672/%2F")
QUEUE = os.environ.get("QUEUE", "demo.tasks")
POISON_EVERY = int(os.environ.get("POISON_EVERY", "30"))
INTERVAL = float(os.environ.get("INTERVAL", "1"))

log = logging.getLogger("publisher")


def main():
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    n = 0
    while True:
        try:
            connection = pika.BlockingConnection(pika.URLParameters(URL))
            channel = connection.channel()
            channel.queue_declare(QUEUE, durable=True)
            channel.confirm_delivery()
            while True:
                n += 1
                body = f"poison-{n}" if n % POISON_EVERY == 0 else f"task-{n}"
                channel.basic_publish("", QUEUE, body.encode(), pika.BasicProperties(
                    message_id=str(uuid.uuid4()), delivery_mode=2, content_type="text/plain"))
                if body.startswith("poison"):
                    log.info("published %s", body)
                connection.sleep(INTERVAL)
        except pika.exceptions.AMQPConnectionError as exc:
            log.warning("cannot reach %s (%r); retrying in 2 s", URL.split("@")[-1], exc)
            time.sleep(2)


if __name__ == "__main__":
    main()
