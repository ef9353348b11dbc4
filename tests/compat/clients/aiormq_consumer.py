"""Compatibility client: aiormq (asyncio, low level), acking good messages and answering the
poison with basic.nack(requeue=True).

Environment: COMPAT_URL, COMPAT_QUEUE, COMPAT_POISON, COMPAT_EVENTS, COMPAT_PREFETCH.
Runs until SIGTERM, then cancels, closes the connection and exits 0; exits 1 on any error.
"""

import asyncio
import os
import signal
import sys

import aiormq

from events import Events


async def consume(events, stop):
    queue = os.environ["COMPAT_QUEUE"]
    poison = os.environ["COMPAT_POISON"]
    connection = await aiormq.connect(os.environ["COMPAT_URL"])
    channel = await connection.channel()
    await channel.basic_qos(prefetch_count=int(os.environ.get("COMPAT_PREFETCH", "10")))

    async def on_message(message):
        label = message.body.decode(errors="replace")
        tag = message.delivery.delivery_tag
        events.write("deliver", label, int(message.delivery.redelivered))
        if label == poison:
            await channel.basic_nack(tag, multiple=False, requeue=True)
            events.write("return", label)
        else:
            await channel.basic_ack(tag)
            events.write("ack", label)

    consume_ok = await channel.basic_consume(queue, on_message, no_ack=False)
    events.write("start")
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait([stopped, connection.closing, channel.closing],
                       return_when=asyncio.FIRST_COMPLETED)
    for side in (connection, channel):
        if side.closing.done():  # closed under us: by the broker, the proxy or the network
            stopped.cancel()
            why = "cancelled" if side.closing.cancelled() else repr(side.closing.exception())
            raise RuntimeError(f"{side} closed while consuming: {why}")
    await channel.basic_cancel(consume_ok.consumer_tag)
    await channel.close()
    await connection.close()
    events.write("stop")


async def main_async():
    events = Events(os.environ["COMPAT_EVENTS"])
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    try:
        await consume(events, stop)
        return 0
    except Exception as exc:  # every failure is the finding: report it, exit non-zero
        events.failed("aiormq", exc)
        return 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main_async()))
