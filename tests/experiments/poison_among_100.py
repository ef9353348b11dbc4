#!/usr/bin/python3
"""The experiment "one poison message among 100", directly against RabbitMQ and through nackguard.

One pika consumer, prefetch 10, acks the 99 good messages and answers the poison with
basic.nack(requeue=true) (or basic.reject, --mode reject) every time, for a fixed time. Prints
a Markdown table row per target. The queue is durable, of the type --queue-type says (default
NACKGUARD_TEST_QUEUE_TYPE, else classic; quorum: x-queue-type quorum, no x-delivery-limit).

By hand, against a running broker and a running nackguard whose policy covers the queue
(max_redeliveries 5, rate.per_message 100 in docs/poison-experiment.md):

    /usr/bin/python3 tests/experiments/poison_among_100.py --direct 5672 --proxy 5673 [--seconds 3]

As a test (CTest experiments.poison_among_100*): --check starts its own nackguard with that
policy in front of the broker on NACKGUARD_TEST_BROKER_PORT (tests/integration/harness.py),
runs both modes on a queue of its own and checks the outcome: through nackguard the poison
is delivered exactly 6 times, then it is in the DLQ, and the 99 good messages are acked;
directly, the poison loops until the end of the run, except on a quorum queue of RabbitMQ 4.0
or later, whose default delivery limit (20) drops it after exactly 21 deliveries (there is no
dead-letter exchange); from 4.3 on that limit counts rejects only, and nacks loop.

    /usr/bin/python3 tests/experiments/poison_among_100.py --check [--queue-type quorum]
"""
import argparse
import collections
import os
import re
import sys
import time
import uuid

import pika

HERE = os.path.dirname(os.path.abspath(__file__))
QUEUE = "poison-experiment"
MAX_REDELIVERIES = 5
BROKER_DEFAULT_DELIVERY_LIMIT = 20  # quorum queues, RabbitMQ 4.0 and later


def queue_arguments(queue_type):
    return {"x-queue-type": "quorum"} if queue_type == "quorum" else None


def run(port, seconds, mode, queue=QUEUE, queue_type="classic"):
    params = pika.ConnectionParameters("127.0.0.1", port)
    connection = pika.BlockingConnection(params)
    channel = connection.channel()
    channel.queue_delete(queue)
    channel.queue_delete(queue + ".dlq")
    channel.queue_declare(queue, durable=True, arguments=queue_arguments(queue_type))
    for i in range(100):
        body = b"poison" if i == 50 else b"good %d" % i
        channel.basic_publish("", queue, body, pika.BasicProperties(message_id="m%d" % i))
    channel.basic_qos(prefetch_count=10)
    deliveries = collections.Counter()
    start = time.monotonic()
    for method, _, body in channel.consume(queue, inactivity_timeout=1):
        if method is None:
            break
        if time.monotonic() - start > seconds:
            # Not processed: give it back, so that it is counted where it is (in the queue).
            channel.basic_nack(method.delivery_tag, requeue=True)
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
        dlq = channel.queue_declare(queue + ".dlq", passive=True).method.message_count
    except pika.exceptions.ChannelClosedByBroker:
        channel = connection.channel()
        dlq = 0
    left = settled_count(channel, queue)
    channel.queue_delete(queue)
    channel.queue_delete(queue + ".dlq")
    connection.close()
    return deliveries[b"poison"], good, dlq, left


def settled_count(channel, queue, timeout=3.0):
    """The queue's ready messages once two reads 0.2 s apart agree: a quorum queue takes back
    the messages returned at the consumer's cancel a moment later."""
    deadline = time.monotonic() + timeout
    count = channel.queue_declare(queue, passive=True).method.message_count
    while time.monotonic() < deadline:
        time.sleep(0.2)
        again = channel.queue_declare(queue, passive=True).method.message_count
        if again == count:
            break
        count = again
    return count


def broker_version(port):
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    try:
        version = connection._impl.server_properties.get("version", b"?")
        return version.decode() if isinstance(version, bytes) else str(version)
    finally:
        connection.close()


def print_table(queue, rows):
    print("| target | poison deliveries | good messages acked | in `%s.dlq` | left in queue |"
          % queue)
    print("|---|---|---|---|---|")
    for name, (poison, good, dlq, left) in rows:
        print("| %s | %d | %d | %d | %d |" % (name, poison, good, dlq, left))


def expected_direct(version, queue_type, mode):
    """What the broker alone does with the poison returned by basic.`mode`: (exact deliveries
    or None for "it loops until the run ends", in the DLQ, left in the queue). RabbitMQ 4.0 to
    4.2 count every return against a quorum queue's default limit; 4.3 and later count rejects
    (and crashes) only, not nacks."""
    release = tuple(int(n) for n in re.findall(r"\d+", version)[:2])
    counted = release >= (4, 0) and (mode == "reject" or release < (4, 3))
    if queue_type == "quorum" and counted:
        return BROKER_DEFAULT_DELIVERY_LIMIT + 1, 0, 0  # dropped: no dead-letter exchange
    return None, 0, 1


def check(args):
    """Runs the experiment through its own nackguard and checks it; returns the exit code."""
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))
    import harness
    from redelivery_support import GuardProxy, policy_yaml

    direct_port = harness.BROKER_PORT
    version = broker_version(direct_port)
    queue = f"{QUEUE}-{args.queue_type}-{uuid.uuid4().hex[:8]}"
    policy = policy_yaml(queue, max_redeliveries=MAX_REDELIVERIES,
                         rate={"per_message": 100})
    proxy = GuardProxy({"poison-experiment.yaml": policy}, name="poison-experiment")
    failures = []
    print(f"RabbitMQ {version} on 127.0.0.1:{direct_port}, {args.queue_type} queue {queue}, "
          f"{args.seconds:g} s per run; nackguard policy max_redeliveries {MAX_REDELIVERIES}, "
          "rate.per_message 100\n")
    try:
        proxy.start()
        for mode in ("nack", "reject"):
            want_poison, want_dlq, want_left = expected_direct(version, args.queue_type, mode)
            direct = run(direct_port, args.seconds, mode, queue, args.queue_type)
            proxied = run(proxy.port, args.seconds, mode, queue, args.queue_type)
            print(f"basic.{mode}(requeue=true):\n")
            print_table(queue, [("RabbitMQ directly", direct), ("through nackguard", proxied)])
            print()
            poison, good, dlq, left = direct
            loops = poison > BROKER_DEFAULT_DELIVERY_LIMIT + 1 if want_poison is None \
                else poison == want_poison
            if not (loops and good == 99 and dlq == want_dlq and left == want_left):
                failures.append(
                    f"{mode}, directly: poison {poison} deliveries (want "
                    f"{want_poison or f'more than {BROKER_DEFAULT_DELIVERY_LIMIT + 1}'}), "
                    f"{good} good acked (want 99), {dlq} in the DLQ (want {want_dlq}), "
                    f"{left} left (want {want_left})")
            if proxied != (MAX_REDELIVERIES + 1, 99, 1, 0):
                failures.append(f"{mode}, through nackguard: (poison deliveries, good acked, "
                                f"in the DLQ, left) = {proxied}, want "
                                f"{(MAX_REDELIVERIES + 1, 99, 1, 0)}")
        fallbacks = proxy.log_lines("fallback")
        if fallbacks:
            failures.append(f"nackguard fell back {len(fallbacks)} times: {fallbacks[:3]}")
    finally:
        code = proxy.stop()
        if failures:
            proxy.keep_dir = True
            print(f"---- nackguard's log ({proxy.log_path}) ----\n{proxy.log_text()}")
        else:
            proxy.remove_dir()
    if code not in (0, None):
        failures.append(f"nackguard exited with code {code}")
    for failure in failures:
        print(f"FAILED: {failure}")
    print("PASS" if not failures else f"{len(failures)} checks failed")
    return 1 if failures else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--direct", type=int, help="the broker's AMQP port")
    parser.add_argument("--proxy", type=int, help="nackguard's listen port")
    parser.add_argument("--check", action="store_true",
                        help="start a nackguard, run both modes and check the outcome")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--mode", choices=["nack", "reject"], default="nack")
    parser.add_argument("--queue-type", choices=["classic", "quorum"],
                        default=os.environ.get("NACKGUARD_TEST_QUEUE_TYPE") or "classic")
    args = parser.parse_args()
    if args.check:
        return check(args)
    if args.direct is None or args.proxy is None:
        parser.error("give --direct and --proxy, or --check")
    rows = [(name, run(port, args.seconds, args.mode, QUEUE, args.queue_type))
            for name, port in (("RabbitMQ directly", args.direct),
                               ("through nackguard", args.proxy))]
    print_table(QUEUE, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
