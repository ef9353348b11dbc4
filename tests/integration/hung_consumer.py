"""A consumer that hangs on one message (issue 12, item 9), for the acknowledgement-timeout
tests (test_ack_timeout.py: nackguard's ack_timeout; test_consumer_timeout.py: RabbitMQ's).

run() consumes `queue` through a pika connection with prefetch 10, on one thread like most
consumers: it acks every message but the poison at once, and blocks in its callback on the
poison (pika keeps reading the socket, and dispatches no other delivery) until its channel is
closed, by the broker or by the proxy; then it opens a new channel and consumes again. It
stops once every innocent message was acked and `done()` holds (checked every 0.5 s), when a
hang lasts `hang_limit_s`, when the poison came more than `max_poison` times, or after
`limit_s`. Every wait is bounded.
"""

import time

from pika.exceptions import AMQPChannelError

import waiting


class Result:
    def __init__(self):
        # (kind, label, consumer): kind "deliver", "ack", "closed" or "hang-limit"; consumer
        # counts the channels opened (pika reuses channel numbers).
        self.events = []
        self.acks = {}              # label -> acks
        self.redelivered_acks = []  # labels acked from a delivery marked redelivered
        self.acked_headers = {}     # label -> the headers of the delivery it was acked from
        self.hangs = []             # seconds each hang on the poison lasted
        self.poison_headers = []    # the headers of each delivery of the poison
        self.closes = []            # (reply_code, reply_text) of each close of the channel
        self.took = 0.0             # seconds the scenario took

    def deliveries_of(self, label):
        return sum(1 for kind, lb, _ in self.events if kind == "deliver" and lb == label)

    def how_acked(self, labels):
        """{label: how its ack came}: ("copy", N) (a copy nackguard republished, carrying
        x-nackguard-returns N; the client sees it redelivered, as it would have seen the
        broker's redelivery), "redelivered" (a delivery marked redelivered, as the broker
        requeued it), or "first" (neither: its first delivery)."""
        out = {}
        for label in labels:
            headers = self.acked_headers.get(label, {})
            if "x-nackguard-returns" in headers:
                out[label] = ("copy", headers["x-nackguard-returns"])
            elif label in self.redelivered_acks:
                out[label] = "redelivered"
            else:
                out[label] = "first"
        return out

    def assert_innocent_acked_once(self, test, innocent, quorum):
        """Each innocent message acked once: the 5 before the poison at their first delivery;
        those behind it, delivered with it and given back with it at its channel's close,
        uncounted (a copy with returns 0 on a quorum queue, where nackguard writes a close's
        returns into copies; redelivered on a classic one). And the poison's headers: a
        suspect copy with returns 1 at its second delivery on a quorum queue, none on a
        classic one."""
        events = self.events
        test.assertEqual(self.unacked_before_poison(), [set(), set()],
                         f"unacked before the poison: {events}")
        test.assertEqual(self.acks, {label: 1 for label in innocent},
                         f"acks of the innocent (events: {events})")
        behind = ("copy", 0) if quorum else "redelivered"
        test.assertEqual(self.how_acked(innocent),
                         {**{label: "first" for label in innocent[:5]},
                          **{label: behind for label in innocent[5:]}},
                         f"how each innocent message was acked (headers: {self.acked_headers})")
        if quorum:
            test.assertEqual([(h.get("x-nackguard-returns"), h.get("x-nackguard-suspect"))
                              for h in self.poison_headers], [(None, None), (1, True)],
                             f"the poison's headers: {self.poison_headers}")
        else:
            test.assertEqual(self.poison_headers, [{}, {}])

    def unacked_before_poison(self):
        """Innocent messages delivered on the poison's channel before it, still unacked
        when it arrived, for each of its deliveries (empty sets: the poison was the
        channel's oldest unacked delivery each time)."""
        out = []
        for i, (kind, label, consumer) in enumerate(self.events):
            if kind == "deliver" and label == self.poison:
                earlier = [e for e in self.events[:i] if e[2] == consumer and e[1] != label]
                out.append({lb for k, lb, _ in earlier if k == "deliver"} -
                           {lb for k, lb, _ in earlier if k == "ack"})
        return out


def run(conn, queue, poison, innocent, done, limit_s=60.0, hang_limit_s=20.0, max_poison=2):
    result = Result()
    result.poison = poison
    state = {"channel": None, "consumer": 0, "finished": False}

    def on_delivery(ch, method, properties, body):
        label = body.decode()
        result.events.append(("deliver", label, state["consumer"]))
        if label != poison:
            if ch.is_open:
                ch.basic_ack(method.delivery_tag)
                result.events.append(("ack", label, state["consumer"]))
                result.acks[label] = result.acks.get(label, 0) + 1
                if method.redelivered:
                    result.redelivered_acks.append(label)
                result.acked_headers[label] = dict(properties.headers or {})
            return
        result.poison_headers.append(dict(properties.headers or {}))
        start = time.monotonic()
        waiting.wait_for(lambda: not ch.is_open, hang_limit_s, 0.05, sleep=conn.sleep)
        result.hangs.append(time.monotonic() - start)
        result.events.append(("closed" if not ch.is_open else "hang-limit", poison,
                              state["consumer"]))

    def on_close(ch, reason):
        if state["finished"]:
            return  # run()'s own close at the end
        result.closes.append((getattr(reason, "reply_code", None),
                              getattr(reason, "reply_text", str(reason))))

    def open_consumer():
        ch = conn.channel()
        ch._impl.add_on_close_callback(on_close)  # BlockingChannel has no public hook
        ch.basic_qos(prefetch_count=10)
        ch.basic_consume(queue, on_delivery)
        state["channel"] = ch
        state["consumer"] += 1

    open_consumer()
    began = time.monotonic()
    next_check = 0.0
    while time.monotonic() - began < limit_s:
        try:
            conn.process_data_events(time_limit=0.1)
        except AMQPChannelError:
            pass
        if result.hangs and result.hangs[-1] >= hang_limit_s:
            break  # nobody closed the channel: the caller's assertions fail
        if result.deliveries_of(poison) > max_poison:
            break
        if not state["channel"].is_open:
            open_consumer()
        if time.monotonic() >= next_check:
            next_check = time.monotonic() + 0.5
            if all(result.acks.get(label) for label in innocent) and done():
                break
    result.took = time.monotonic() - began
    conn.process_data_events(time_limit=1.0)  # an extra delivery would show now
    state["finished"] = True
    if state["channel"].is_open:
        state["channel"].close()
    return result
