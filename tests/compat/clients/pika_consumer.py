"""Compatibility client: pika's BlockingConnection, acking good messages and answering the
poison with basic.nack(requeue=True), as a naive consumer does on every failure.

Environment: COMPAT_URL, COMPAT_QUEUE, COMPAT_POISON, COMPAT_EVENTS, COMPAT_PREFETCH.
Runs until SIGTERM, then cancels, closes the connection and exits 0; exits 1 on any error.
"""

import os
import signal
import sys

import pika

from events import Events


def main():
    events = Events(os.environ["COMPAT_EVENTS"])
    queue = os.environ["COMPAT_QUEUE"]
    poison = os.environ["COMPAT_POISON"]
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))

    def on_message(channel, method, properties, body):
        label = body.decode(errors="replace")
        events.write("deliver", label, int(method.redelivered))
        if label == poison:
            channel.basic_nack(method.delivery_tag, multiple=False, requeue=True)
            events.write("return", label)
        else:
            channel.basic_ack(method.delivery_tag)
            events.write("ack", label)

    try:
        params = pika.URLParameters(os.environ["COMPAT_URL"])
        connection = pika.BlockingConnection(params)
        channel = connection.channel()
        channel.basic_qos(prefetch_count=int(os.environ.get("COMPAT_PREFETCH", "10")))
        tag = channel.basic_consume(queue, on_message)
        events.write("start")
        while not stopping:
            connection.process_data_events(time_limit=0.1)
        channel.basic_cancel(tag)
        connection.close()
        events.write("stop")
        return 0
    except Exception as exc:  # every failure is the finding: report it, exit non-zero
        events.failed("pika", exc)
        return 1


if __name__ == "__main__":
    sys.exit(main())
