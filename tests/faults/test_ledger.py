"""The randomized ledger test (issue 37): every confirmed message accounted for, through a
three-node cluster, two nackguard sidecars and crashing consumers, under a seeded nemesis.

The run: a private three-node RabbitMQ cluster (tests/rabbitmq-cluster.sh, through
tests/integration/cluster_support.py: 3.10 by default, 4.3 selectable), one quorum queue
(x-quorum-initial-group-size 3) and the DLQ nackguard declares for it; a policy of
max_redeliveries 3, requeue immediate (or delayed, short backoffs), no per-message rate limit,
no outage detection; two sidecars (separate nackguard processes, upstream.addresses = the
three nodes); four consumer processes (ledger_consumer.py, pika, prefetch 10), two behind each
sidecar, that ack good messages, give nack- and reject- poisons back with requeue every time,
and die (os._exit) on crash- poisons, restarted at once by the test. A publisher, directly to
the cluster with publisher confirms, spreads the messages over the run (ledger_plan.py: about
1% poisons of each kind); each id is in the Ledger as published, then confirmed. Meanwhile the
nemesis (ledger_nemesis.py) carries out a schedule drawn from the seed: kill -9 of a sidecar
and its restart on the same port, stop_app / start_app of one node at a time, kill -9 of a
consumer. When everything has come to rest (the queue drained, the consumers stopped, nothing
unacked), the checker (ledger_checker.py) accounts for every confirmed id and FAILS on any
loss, any innocent dead-letter, or a poison delivered more than max_redeliveries + 1 times
where docs/choosing-a-policy.md ("How nackguard counts") says its count is exact (and on any
poison delivered more than 3 x that). The report (ledger_report.py) is printed, with the seed
and schedule; the run's directory (consumers' event logs, sidecars' configs and logs, the
report) is kept when the run fails, under $NACKGUARD_BUILD_DIR/faults-tmp/ledger-SEED-*.

Environment:
  NACKGUARD_LEDGER_SEED=N      replay the run of seed N (printed as `seed=N` at the start):
                               the same messages, poisons and nemesis schedule (the
                               processes' timing is the machine's); unset: a random seed
  NACKGUARD_LEDGER_LONG=1      the long run: 3,000 messages (15 returning and 15 crashing
                               poisons), spread over 110 s, with 6 sidecar kills, 6 consumer
                               kills and 4 node stops. Default: the CI run, 1,000 messages (10
                               and 10) over 60 s, 2 sidecar kills, 3 consumer kills and 2 node
                               stops: about 2 minutes in all, the cluster's start included
  NACKGUARD_LEDGER_VERSION=3.10|4.3  the cluster's RabbitMQ (default 3.10, as in CI)
  NACKGUARD_LEDGER_REQUEUE=immediate|delayed  the policy's requeue (default immediate;
                               delayed: backoff 200 ms doubling to 1 s, no jitter)
  NACKGUARD_LEDGER_MESSAGES=N  another number of messages (the CI run: 1% of them of each
                               poison kind; the long run: 15 and 15 whatever N)
  NACKGUARD_TEST_CLUSTER_DIR   where the cluster's nodes live (cluster_support's default:
                               $NACKGUARD_BUILD_DIR/cluster, or cluster-4.3)
  NACKGUARD_TEST_CLUSTER_KEEP=1  leave the cluster running afterwards (the next run reuses it;
                               not on a shared machine: the nodes then run outside the
                               cluster lock, where test_cluster would take them over)
  NACKGUARD_FAULTS_KEEP_TMP=1  keep the run's directory when it passes too

By hand (never tests/run.sh on the shared machine), from tests/faults:
  export NACKGUARD_BUILD_DIR=$PWD/../../build
  export NACKGUARD_TEST_CLUSTER_DIR=$NACKGUARD_BUILD_DIR/ledger-cluster
  /usr/bin/python3 -m unittest -v test_ledger                     # the CI run
  NACKGUARD_LEDGER_LONG=1 /usr/bin/python3 -m unittest -v test_ledger
  NACKGUARD_LEDGER_SEED=1234 NACKGUARD_LEDGER_LONG=1 ...           # replay a seed
In CI: faults.test_ledger (tests/faults/CMakeLists.txt), under the RESOURCE_LOCK of the
cluster tests, which use the same nodes and ports.
"""

import json
import os
import shutil
import sys
import tempfile
import time
import uuid

import faults_support as fs
import ledger_cluster as lc
import ledger_drain
import ledger_report
from faults_ledger import Ledger
from ledger_checker import Inputs, check
from ledger_nemesis import Nemesis, describe_event, make_schedule
from ledger_plan import Settings, plan_messages
from ledger_sidecars import start_sidecars, stop_sidecars
from ledger_traffic import Publisher, declare_quorum_queue, delete_queues
from ledger_workers import ConsumerPool, Progress, read_events

SETTINGS = Settings()


def say(text):
    print(f"[ledger {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def setUpModule():
    say(f"seed={SETTINGS.seed} (replay: NACKGUARD_LEDGER_SEED={SETTINGS.seed}"
        f"{' NACKGUARD_LEDGER_LONG=1' if SETTINGS.long else ''})")
    seconds = lc.start()
    say(f"RabbitMQ {lc.VERSION} cluster {', '.join(n.address for n in lc.NODES)} ready after "
        f"{seconds:.1f} s")


def tearDownModule():
    lc.stop()


class LedgerTest(fs.FaultTest):
    watchdog_timeout = 1500 if SETTINGS.long else 600

    def setUp(self):
        super().setUp()
        s = SETTINGS
        self.run_dir = tempfile.mkdtemp(prefix=f"ledger-{s.seed}-", dir=fs.tmp_root())
        self.queue = f"faults.ledger.{uuid.uuid4().hex[:8]}"
        self.schedule = make_schedule(s)
        say(f"{s.describe()}\n  run directory {self.run_dir}\n  schedule:\n" +
            "\n".join(f"    {describe_event(e)}" for e in self.schedule))
        lc.ensure_all_up()
        declare_quorum_queue(self.queue)
        self.addCleanup(self._delete_queues_of_run)
        addresses = [node.address for node in lc.NODES]
        self.sidecars = start_sidecars(s.sidecars, self.run_dir, addresses, self.queue, s)
        self.addCleanup(stop_sidecars, self.sidecars)
        ports = [self.sidecars[i % s.sidecars].port for i in range(s.consumers)]
        self.pool = ConsumerPool(self.queue, ports, self.run_dir, s.prefetch)
        self.sidecar_of = {w.name: self.sidecars[i % s.sidecars].name
                           for i, w in enumerate(self.pool.workers)}

    def _delete_queues_of_run(self):
        names = [self.queue, f"{self.queue}.dlq"]
        try:
            names += ledger_drain.delay_queues(self.queue)
        except AssertionError:
            pass
        delete_queues(names)

    def test_every_confirmed_message_accounted_for(self):
        s = SETTINGS
        wall0 = time.monotonic()
        ledger = Ledger("ledger")
        self.pool.start()
        self.addCleanup(self.pool.stop)
        nemesis = Nemesis(self.schedule, self.sidecars, self.pool,
                          [self.queue, f"nackguard.delay.{self.queue}."])
        publisher = Publisher(plan_messages(s), self.queue, ledger, s.publish_seconds)
        t0 = time.time()
        publisher.start()
        nemesis.start()
        self.addCleanup(nemesis.stop)

        publisher.join(s.publish_seconds + 180)
        self.assertFalse(publisher.is_alive(), "the publisher did not finish")
        self.assertTrue(fs.wait_until(nemesis.finished, 300, step=0.5),
                        "the nemesis did not finish its schedule")
        nemesis.stop()
        say(f"published {len(ledger.published)}, confirmed {len(ledger.confirmed)}; "
            f"nemesis done: {nemesis.summary()}; waiting for the queue to drain")
        watch = ledger_drain.DrainWatch(self.queue, ledger, Progress(self.pool.event_paths()),
                                        delayed=s.requeue == "delayed")
        drained = watch.wait(s.drain_timeout)
        t_end = time.time()
        self.pool.stop()
        nothing_unacked, unacked = ledger_drain.wait_nothing_unacked(
            (self.queue, f"nackguard.delay.{self.queue}."), 90)
        dead_letters, left = ledger_drain.take_everything(self.queue)
        stop_sidecars(self.sidecars)  # their logs are complete from here on
        wall = time.monotonic() - wall0

        inputs = Inputs(s, ledger, read_events(self.pool.event_paths()), dead_letters, left,
                        nemesis.log, self.sidecar_of,
                        {sc.name: sc.full_log() for sc in self.sidecars}, t0, t_end)
        verdict = check(inputs)
        extra = dict(drained=drained, drain_state=watch.state.replace(" ", "_"),
                     nothing_unacked=nothing_unacked, publisher_connects=publisher.connects,
                     publisher_errors=len(publisher.errors), **self.pool.summary(),
                     sidecar_kills=sum(sc.kills for sc in self.sidecars),
                     wall_seconds=round(wall, 1))
        report = ledger_report.render(verdict, inputs, self.schedule, self.sidecars, nemesis,
                                      extra)
        row = ledger_report.result_row(verdict, inputs, nemesis, wall)
        print("\n" + report, file=sys.stderr, flush=True)
        self._keep_record(report, row, publisher, inputs)

        problems = [f"{kind} {msg_id}: {text}" for kind, msg_id, text in verdict.failures]
        problems += [f"nemesis: {err}" for err in nemesis.errors]
        if not drained:
            problems.append(f"not drained within {s.drain_timeout:.0f} s: {watch.state}")
        if not nothing_unacked:
            problems.append(f"messages still unacked after the consumers stopped: {unacked}")
        if problems:
            self.keep_run_dir = True
        self.assertEqual(problems, [], f"seed={s.seed}: {len(problems)} findings (report "
                                       f"above, run directory {self.run_dir})")

    def _keep_record(self, report, row, publisher, inputs):
        with open(os.path.join(self.run_dir, "report.txt"), "w") as f:
            f.write(report + "\n")
        with open(os.path.join(self.run_dir, "result.json"), "w") as f:
            json.dump(row, f, sort_keys=True)
            f.write("\n")
        with open(os.path.join(self.run_dir, "publisher-errors.txt"), "w") as f:
            f.writelines(f"{t:.3f} {what}\n" for t, what in publisher.errors)
        with open(os.path.join(self.run_dir, "final-state.json"), "w") as f:
            json.dump({"t0": inputs.t0, "t_end": inputs.t_end, "dlq": inputs.dlq,
                       "left": inputs.left, "nemesis": inputs.nemesis_log,
                       "confirmed": sorted(inputs.ledger.confirmed),
                       "published": list(inputs.ledger.published),
                       "in_doubt": sorted(inputs.ledger.in_doubt),
                       "nacked": sorted(inputs.ledger.nacked),
                       "sidecar_of": inputs.sidecar_of}, f, default=str)
        self.record(**row)

    def run(self, result=None):
        self.keep_run_dir = False
        outcome = super().run(result)
        failed = result is not None and any(t is self for t, _ in
                                            result.failures + result.errors)
        if failed or self.keep_run_dir or SETTINGS.keep_dir:
            say(f"run directory kept: {getattr(self, 'run_dir', '?')}")
        elif getattr(self, "run_dir", None):
            shutil.rmtree(self.run_dir, ignore_errors=True)
        return outcome


if __name__ == "__main__":
    import unittest
    unittest.main()
