# ctest-variants: quorum rmq43 rmq43.quorum
"""Two client edges of issue 38, each of which failed on the binary before its fix (6cab5bb).

(1) Every basic.get is answered. When nackguard takes over a message the broker gave to a
    basic.get (to republish it with its count, to delay it, to dead-letter it), it answers
    the client basic.get-empty; before, it sent nothing, and a polling client (pika's
    basic_get) waited for ever. A client polls a queue holding a poison and 4 good messages
    with basic_get(auto_ack=False), acks the good ones and gives the poison back, through a
    sidecar with max_redeliveries 5 and the default rate limit (3 returns per 10 s: the 4th
    return and later come back through a 200 ms delay queue):
      (a) basic_nack(requeue=True)  (b) basic_reject(requeue=True)
      (c) a crash: the poller's connection ends without a close while it holds the poison it
          got, and a new connection polls again;
      (d) quorum variants: (b) on a queue declared with x-delivery-limit 3, which the proxy
          keeps the poison from passing by republishing it at the delivery the limit would
          end (at least one get-ok is taken over: nackguard_deliveries_total exceeds the
          get-oks the client saw).
    Every basic.get is answered within 5 s; the poison is got exactly 6 times in all (its
    copies included; a copy back from a delay queue, which carries x-death, comes at least
    its TTL after the return), then sits alone in <queue>.dlq with x-nackguard-returns 6 and
    reason max_redeliveries (crash_loop for (c)); each good message is got and acked once.
    Before the fix, (c) on every variant and (d) got no answer to a basic.get: the old
    binary took over the poison's get-ok at its next delivery after a crash, and at the
    queue's limit. (a) and (b) passed there: it took the poison over at the nack or reject.
    On a quorum queue the new binary takes get-oks over in (b) and (c) too, and in (a) on
    3.10, which counts nacks (at its assumed limit of 2, with none declared); on a classic
    queue it takes a get-ok over in none of them (a crash's copy is made at the crash).
(2) A client's connection.close ends as the broker ends it. After relaying the broker's
    connection.close-ok, nackguard used to close the client's socket at once; now the socket
    stays open until the client closes it, or 10 s. A raw client sends connection.close,
    reads connection.close-ok, and sees no EOF within 2 s, directly from the broker and
    through the proxy (measured directly on 3.10.8 and 4.3.6: the broker ends it 30 s after
    its close-ok, sending a heartbeat frame just before); it then closes, and the proxy's
    nackguard_client_connections falls to 0. A client that never closes has its socket
    ended by the proxy 10 s after the close-ok (measured 9.96 s; the proxy's 500 ms tick
    makes it 9.5 to 10.5 s), and the count falls to 0. Classic variants only: no queue is
    involved.
"""

import collections
import re
import time
import uuid

import amqp_wire as aw
import client_edges_support as ces
import harness
import redelivery_support as rs
from redelivery_support import props

POISON = "poison"
GOODS = [f"good-{i}" for i in range(1, 5)]
MAX_REDELIVERIES = 5
DELAY_MS = 200
ANSWER_TIMEOUT = 5.0  # a basic.get's answer, get-ok or get-empty, comes within this
SCENARIO_TIMEOUT = 60.0
BROKER_LIMIT = 3  # test (d): the quorum queue's x-delivery-limit, below 6 deliveries
DELAY_QUEUE_TTL = re.compile(r"^nackguard\.delay\..*\.(\d+)ms$")


class PollState:
    """What the polling clients saw: the poison's deliveries, and each good message's gets."""

    def __init__(self):
        self.poison = []  # (monotonic time got, headers)
        self.returned_at = []  # monotonic time of each return (nack, reject or crash)
        self.goods = collections.Counter()
        self.pollers = []  # ces.GetPoller, one per connection

    def note(self, body, properties):
        label = body.decode(errors="replace")
        if label == POISON:
            self.poison.append((time.monotonic(), dict(properties.headers or {})))
        else:
            self.goods[label] += 1
        return label

    def got_oks(self):
        return len(self.poison) + sum(self.goods.values())

    def describe(self):
        carried = [h.get("x-nackguard-returns") for _, h in self.poison]
        gets = sum(p.gets for p in self.pollers)
        empties = sum(p.empties for p in self.pollers)
        return (f"{gets} basic.gets on {len(self.pollers)} connections, {empties} answered "
                f"empty; poison got {len(self.poison)} times (x-nackguard-returns "
                f"{carried}); goods got {dict(self.goods)}")


class GetAnsweredTest(rs.RedeliveryTest):

    def start(self, arguments=None):
        """The sidecar, the queue (with `arguments`), the poison and the good messages."""
        self.queue = self.queue_name("get", delay_ttls_ms=(DELAY_MS,))
        backoff = {"initial": f"{DELAY_MS}ms", "multiplier": 1, "max": f"{DELAY_MS}ms",
                   "jitter": "none"}
        self.proxy = self.start_guard({"q.yaml": rs.policy_yaml(
            self.queue, max_redeliveries=MAX_REDELIVERIES, backoff=backoff)})
        self.declare_source(self.proxy, self.queue, arguments)
        self.broker.publish(self.queue, [(label.encode(), props(
            message_id=f"{label}-{uuid.uuid4().hex[:8]}", delivery_mode=2))
            for label in [POISON] + GOODS])

    def finished(self, state):
        return (set(state.goods) == set(GOODS)
                and (self.broker.message_count(f"{self.queue}.dlq") or 0) >= 1)

    def poll(self, state, give_back):
        """Polls through one new connection until the scenario is over (True), or until
        give_back(poller, method), which returns the poison, says the connection is gone
        (False)."""
        poller = ces.GetPoller(self.proxy.port, self.queue, ANSWER_TIMEOUT)
        self.addCleanup(poller.close)
        state.pollers.append(poller)
        deadline = time.monotonic() + SCENARIO_TIMEOUT
        try:
            while time.monotonic() < deadline:
                got = poller.get()
                if got is None:
                    if self.finished(state):
                        return True
                    poller.pause()
                    continue
                method, properties, body = got
                if state.note(body, properties) != POISON:
                    poller.ch.basic_ack(method.delivery_tag)
                    continue
                state.returned_at.append(time.monotonic())
                if not give_back(poller, method):
                    return False
        except ces.NoAnswer as exc:
            self.fail(f"{exc}; so far: {state.describe()}")
        self.fail(f"not over after {SCENARIO_TIMEOUT:.0f} s: {state.describe()}; "
                  f"DLQ holds {self.broker.message_count(f'{self.queue}.dlq')}")

    def taken_over_gets(self, state):
        """The broker's get-oks the proxy kept from the client (each answered get-empty)."""
        page = self.proxy.metrics()
        return int(page.value("nackguard_deliveries_total", queue=self.queue) or 0) - \
            state.got_oks()

    def check(self, state, reason):
        seen = f"{state.describe()}; get-oks taken over: {self.taken_over_gets(state)}"
        self.assertEqual(len(state.poison), MAX_REDELIVERIES + 1, seen)
        self.assertEqual(dict(state.goods), {label: 1 for label in GOODS}, seen)
        # Copies back from a delay queue (the broker's x-death names it) came after its TTL.
        delayed = 0
        for (got_at, headers), returned_at in zip(state.poison[1:], state.returned_at):
            deaths = headers.get("x-death") or []
            match = DELAY_QUEUE_TTL.match(str(deaths[0].get("queue", ""))) if deaths else None
            if match:
                delayed += 1
                self.assertGreaterEqual(got_at - returned_at, int(match.group(1)) / 1000, seen)
        self.assertGreaterEqual(delayed, 1, f"no copy came back from a delay queue; {seen}")
        dead = self.broker.get_all(f"{self.queue}.dlq")
        self.assertEqual([(b.decode(), p.headers.get("x-nackguard-reason"),
                           p.headers.get("x-nackguard-returns")) for _, p, b in dead],
                         [(POISON, reason, MAX_REDELIVERIES + 1)], seen)
        self.assertEqual(harness.wait_message_count(self.broker._channel(), self.queue, 0), 0,
                         seen)
        self.assert_proxy_alive(self.proxy)
        return seen

    def requeue_loop(self, how):
        state = PollState()

        def give_back(poller, method):
            if how == "nack":
                poller.ch.basic_nack(method.delivery_tag, requeue=True)
            else:
                poller.ch.basic_reject(method.delivery_tag, requeue=True)
            return True

        self.assertTrue(self.poll(state, give_back))
        return state

    def test_a_nack_requeue(self):
        self.start()
        self.check(self.requeue_loop("nack"), "max_redeliveries")

    def test_b_reject_requeue(self):
        self.start()
        self.check(self.requeue_loop("reject"), "max_redeliveries")

    def test_c_crash_holding_the_got_poison(self):
        self.start()
        state = PollState()

        def crash(poller, _method):
            poller.crash()
            return False

        for _ in range(3 * (MAX_REDELIVERIES + 1)):
            if self.poll(state, crash):
                break
        else:
            self.fail(f"not over after {3 * (MAX_REDELIVERIES + 1)} connections: "
                      f"{state.describe()}")
        self.check(state, "crash_loop")

    def test_d_reject_on_a_quorum_queue_with_its_own_delivery_limit(self):
        if harness.QUEUE_TYPE != "quorum":
            self.skipTest("a delivery limit is a quorum queue's")
        # Rejects count against x-delivery-limit on every version: at a delivery whose next
        # return would pass it, the proxy republishes the message before the client sees it.
        self.start({"x-delivery-limit": BROKER_LIMIT})
        state = self.requeue_loop("reject")
        seen = self.check(state, "max_redeliveries")
        self.assertGreaterEqual(self.taken_over_gets(state), 1, seen)


class ClientCloseTest(harness.IntegrationTest):
    """A raw client's connection.close, directly and through the shared proxy."""

    longMessage = False  # the messages below say what was seen
    wants_shared_proxy = harness.QUEUE_TYPE == "classic"

    def setUp(self):
        super().setUp()
        if harness.QUEUE_TYPE != "classic":
            self.skipTest("no queue is involved: the classic variants cover it")
        self.require_proxy()

    def connections(self):
        return self.shared_proxy.metrics().value("nackguard_client_connections")

    def test_close_ok_leaves_the_socket_to_the_client(self):
        for target in self.targets():
            sock, reader, closed_at = ces.raw_close(target.port)
            try:
                if target.name == "proxy":
                    self.assertTrue(ces.wait_for(lambda: self.connections() == 1, 5.0),
                                    f"the proxy counts {self.connections()} client "
                                    "connections, not the one open")
                eof_at, frames = ces.eof_after(sock, reader, 2.0)
                self.assertIsNone(eof_at, f"{target.name}: the socket ended "
                                          f"{(eof_at or 0) - closed_at:.2f} s after "
                                          "connection.close-ok")
                self.assertEqual([f for f in frames if f.type == aw.FRAME_METHOD], [],
                                 f"{target.name}: methods after connection.close-ok")
            finally:
                sock.close()
        self.assertTrue(ces.wait_for(lambda: self.connections() == 0, 5.0),
                        f"the proxy still counts {self.connections()} client connections "
                        "5 s after the client closed")

    def test_proxy_ends_it_after_10_s_if_the_client_never_closes(self):
        sock, reader, closed_at = ces.raw_close(self.proxy_port)
        try:
            eof_at, _frames = ces.eof_after(sock, reader, 2.0)
            self.assertIsNone(eof_at, f"the socket ended {(eof_at or 0) - closed_at:.2f} s "
                                      "after connection.close-ok")
            self.assertTrue(ces.wait_for(lambda: self.connections() == 1, 5.0),
                            f"the proxy counts {self.connections()} client connections, not "
                            "the one still open")
            eof_at, _frames = ces.eof_after(sock, reader, 13.0)
        finally:
            sock.close()
        self.assertIsNotNone(eof_at, "the proxy left the socket open 15 s after close-ok")
        after = eof_at - closed_at
        # 10 s on the proxy's clock, which its 500 ms tick reads: 9.5 to 10.5 s, and slack.
        self.assertTrue(9.0 <= after <= 12.0, f"the socket ended {after:.2f} s after "
                                              "connection.close-ok, not 10 s")
        self.assertTrue(ces.wait_for(lambda: self.connections() == 0, 5.0),
                        f"the proxy still counts {self.connections()} client connections")
