"""What test_process_faults.py runs beside nackguard, besides its traffic: consumer child
processes to kill -9 (ConsumerChildren), a raw consumer that stops reading and then reads
slowly (SlowRawConsumer), a thread sampling one of the proxy's metrics (MetricWatcher), and
the proxy's copy counters summed up for a test's record."""

import collections
import os
import signal
import subprocess
import sys
import threading
import time

import faults_support as fs
import rawamqp


class ConsumerChildren:
    """Consumer child processes (`faults_support.py consume`, consumer_main) on `queue`
    through `port`: prefetch 50, acks held back in batches of up to 40 for up to 1 s,
    every 25th message poison, every 7th flaky. All of them append to one events file
    in `directory` ("ack ID", "nack ID"), and their stderr to another. `add_cleanup` (a
    test's addCleanup) kills a child the test left running."""

    def __init__(self, port, queue, directory, add_cleanup):
        self.port = port
        self.queue = queue
        self.events = os.path.join(directory, "consumer-events.txt")
        self.stderr_path = os.path.join(directory, "consumer-stderr.txt")
        self.add_cleanup = add_cleanup

    def spawn(self):
        with open(self.stderr_path, "ab") as err:
            child = subprocess.Popen(
                [sys.executable, os.path.join(fs.HERE, "faults_support.py"), "consume",
                 str(self.port), self.queue, self.events, "50", "40", "1000", "25", "7"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
        self.add_cleanup(lambda: child.poll() is None and (child.kill(), child.wait()))
        return child

    def stderr_tail(self, chars=2000):
        with open(self.stderr_path, errors="replace") as f:
            return f.read()[-chars:]

    def kill_holding_unacked(self, child, node, delay_queue):
        """kill -9 of `child` once the broker counts unacked deliveries on the queue (15 s
        at most); {"unacked_at_kill": n, "in_delay_queue_at_kill": ready in delay_queue}."""
        # The consumer acks in batches, so it holds unacked deliveries most of the time,
        # but the broker's count can read 0 between two batches (CI once read it twice):
        # kill at a moment it reads more, as the test means to.
        unacked = [0]

        def holds_unacked():
            unacked[0] = node.queues(self.queue).get(self.queue, (None, 0))[1]
            return unacked[0] > 0

        fs.wait_until(holds_unacked, 15, 0.1)
        waiting_delayed = fs.message_count(delay_queue)
        child.send_signal(signal.SIGKILL)
        child.wait()
        return {"unacked_at_kill": unacked[0], "in_delay_queue_at_kill": waiting_delayed}

    def settled(self, ledger, poison):
        """The queue is empty, and every confirmed id of `ledger` the children did not ack
        can be in the DLQ, which holds at least the `poison` poison messages."""
        fresh = fs.Ledger("probe")
        fresh.confirmed = set(ledger.confirmed)
        fs.read_consumer_events(self.events, fresh)
        missing = fresh.unconsumed_confirmed()
        dlq = fs.message_count(f"{self.queue}.dlq") or 0
        return fs.message_count(self.queue) == 0 and missing <= dlq and dlq >= poison

    def read_events(self, ledger):
        fs.read_consumer_events(self.events, ledger)


def copy_counters(proxy, metrics):
    """For a test's record: the returns, requeues by action and fallbacks by cause in
    `metrics` (a FaultProxy.metrics() scrape), the fallbacks now, and the first fallback
    log lines."""
    return dict(
        returns_total=sum(v for k, v in metrics.items()
                          if k.startswith("nackguard_returns_total")),
        requeues={k.split("action=")[1].split('"')[1]: v for k, v in metrics.items()
                  if k.startswith("nackguard_requeues_total")},
        fallbacks=proxy.metric_sum("nackguard_fallbacks_total"),
        fallback_causes={k.split("cause=")[1].split('"')[1]: v
                         for k, v in metrics.items()
                         if k.startswith("nackguard_fallbacks_total") and v},
        fallback_log=[line.split(" ", 2)[-1][:200]
                      for line in proxy.log_lines("fallback")[:3]])


def dead_letter_counters(metrics):
    """For a test's record: dead-letters and delayed requeues in a metrics scrape."""
    return {"dead_letters": sum(v for k, v in metrics.items()
                                if k.startswith("nackguard_dead_letters_total")),
            "delayed": sum(v for k, v in metrics.items()
                           if k.startswith("nackguard_requeues_total") and "delayed" in k)}


class SlowRawConsumer:
    """A raw consumer of `queue` through `port` with prefetch 0 (unlimited) and a 64 KiB
    receive buffer, which reads its socket only when told to. After each read it nacks
    (requeue) every 500th message the first time it comes and acks the rest, multiple=true;
    `taken` counts the ids it acked."""

    def __init__(self, port, queue, ledger):
        self.client = rawamqp.Client(port, timeout=10, rcvbuf=65536)
        self.queue = queue
        self.ledger = ledger
        self.taken = collections.Counter()

    def start(self):
        client = self.client
        client.handshake()
        client.open_channel(1)
        client.send(rawamqp.basic_qos(1, 0))
        client.expect(rawamqp.BASIC_QOS_OK)
        client.send(rawamqp.basic_consume(1, self.queue))
        client.expect(rawamqp.BASIC_CONSUME_OK)

    def read_and_settle(self, seconds):
        client = self.client
        client.pump(seconds)
        last = None
        for d in client.deliveries:
            if d is None:
                continue
            if fs.number_of(d.id) % 500 == 0 and not d.redelivered:
                if last is not None:
                    client.send(rawamqp.basic_ack(1, last, multiple=True))
                    last = None
                client.send(rawamqp.basic_nack(1, d.tag, requeue=True))
                self.ledger.returned(d.id)
                continue
            self.ledger.consume(d.id)
            self.taken[d.id] += 1
            last = d.tag
        client.deliveries.clear()
        if last is not None:
            client.send(rawamqp.basic_ack(1, last, multiple=True))

    def read_slowly(self, seconds):
        slow_until = time.monotonic() + seconds
        while time.monotonic() < slow_until:  # slow: ~10 ms of reading every 100 ms
            self.read_and_settle(0.01)
            time.sleep(0.09)  # deliberate: the pace of a slow reader

    def read_all(self, count, timeout):
        """Reads on until `count` ids are taken, `timeout` s at most."""
        deadline = time.monotonic() + timeout
        while len(self.taken) < count and time.monotonic() < deadline:
            self.read_and_settle(0.05)

    def close(self):
        self.client.close()

    def abort(self):
        self.client.abort()


class MetricWatcher(threading.Thread):
    """Samples the sum of one of `proxy`'s metrics every `interval` seconds into `values`."""

    def __init__(self, proxy, metric, interval=0.2):
        super().__init__(daemon=True)
        self.proxy = proxy
        self.metric = metric
        self.interval = interval
        self.values = []
        self._halt = threading.Event()

    def run(self):
        while not self._halt.is_set():
            self.values.append(self.proxy.metric_sum(self.metric))
            self._halt.wait(self.interval)

    def stop(self):
        self._halt.set()
        self.join(5)
        return self
