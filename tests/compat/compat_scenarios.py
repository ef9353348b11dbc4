"""The scenarios each client of a legacy fleet (compat_languages.py) runs, each as one client
of the suite (compat.py runs it like the others: its own proxy, queue and results):

  nack, reject  a consumer (prefetch 10) that gives the poison back with basic.nack or
                basic.reject(requeue=true): the suite's own scenario, plus "every good
                message acked exactly once"
  crash         the consumer exits as soon as it gets the poison, holding it and what it
                prefetched (prefetch 10); the suite restarts it, as a supervisor would: the
                poison is dead-lettered with reason crash_loop after 4 deliveries, and no
                good message is dead-lettered (crash attribution)
  get           a basic.get poller that rejects the poison with requeue: bounded the same
                way, and every basic.get answered (get-ok or get-empty), none left waiting
  reconnect     10 good messages; once they are acked the broker closes the client's
                connection (`rabbitmqctl close_connection` on nackguard's upstream one);
                after the client's own reconnect, the other 10 and the poison: consumed and
                bounded as for nack
  traffic       the client's common API (declare, publish with confirms, basic.get, qos,
                consume, ack with multiple, cancel, get-empty) run directly against the
                broker, then through nackguard: the client must see the same both times

compat.py asks a client for goal_reached() (the traffic scenario's end) and check_run()
(checks of its own), when it has them. Import compat_clients before this module: it imports
compat_languages, which builds its clients from these, at its end.
"""

import os
import time

from compat_clients import Client, publish_labels, read_events, stop_process
from compat_common import GOOD, POISON, harness
from redelivery_support import CRASH_EXIT_CODE

GET_ANSWER_SECONDS = 5.0  # a basic.get unanswered for this long: the poller hangs
MAX_RESTARTS = 10         # of the crash scenario's consumer; the poison needs 4
FIRST_BATCH = GOOD[:10]   # the reconnect scenario, before and after the close
SECOND_BATCH = GOOD[10:15] + [POISON] + GOOD[15:]


def connection_name(queue):
    """The connection_name every consumer program gives its connection (through nackguard,
    the broker sees it on nackguard's upstream connection too)."""
    return f"compat {queue}"


def close_broker_connections(name, reason):
    """Closes with `rabbitmqctl close_connection` every connection of the broker whose client
    named it `name` (through nackguard: its upstream one); returns their pids."""
    # Text, not JSON: close_connection takes the pid as the text output writes it.
    lines = harness.rabbitmqctl("list_connections", "-q", "--no-table-headers", "pid",
                                "client_properties").splitlines()
    pids = [line.split("\t", 1)[0] for line in lines
            if f'{{"connection_name","{name}"}}' in line]
    for pid in pids:
        harness.rabbitmqctl("close_connection", pid, reason)
    return pids


class LanguageScenario(Client):
    """One language's consumer program (compat_languages.Language) in one scenario."""

    mode = ""            # the program's argument, and the suite client's name's suffix
    scenario = ""        # for the title
    scenario_notes = ""

    def __init__(self, language):
        self.language = language
        self.name = f"{language.name}-{self.mode}"
        self.title = f"{language.title}: {self.scenario}"
        self.notes = self.scenario_notes + (f" {language.notes}" if self.mode == "nack" else "")

    def version(self):
        return self.language.version()

    def argv(self, run):
        return self.language.argv(self.mode)

    def start(self, run):
        self.language.prepare()
        super().start(run)

    def stop(self, run):
        stop_process(self.process, run, expect_code=self.language.sigterm_exit_code,
                     what=self.name)

    def check_run(self, result, run, broker, counts, check):
        acks = counts["acks"]
        wrong = {label: acks.get(label, 0) for label in GOOD if acks.get(label, 0) != 1}
        check("every good message acked exactly once", not wrong,
              f"acks other than 1: {wrong}" if wrong else f"{len(GOOD)} × 1")


class ConsumeNack(LanguageScenario):
    mode = "nack"
    scenario = "consumer, basic.nack(requeue=true)"
    gives_back = "basic.nack(requeue=true)"
    scenario_notes = "A consumer with prefetch 10 that nacks the poison with requeue."


class ConsumeReject(LanguageScenario):
    mode = "reject"
    scenario = "consumer, basic.reject(requeue=true)"
    gives_back = "basic.reject(requeue=true)"
    scenario_notes = "A consumer with prefetch 10 that rejects the poison with requeue."


class CrashLoop(LanguageScenario):
    mode = "crash"
    scenario = "consumer that dies on the poison, restarted"
    gives_back = ("nothing: the process exits holding the poison and what it prefetched "
                  "(prefetch 10); a supervisor restarts it")
    expected_reason = "crash_loop"
    scenario_notes = ("The consumer process exits (code 17) as soon as it gets the poison, "
                      "with up to 9 more messages prefetched; the suite restarts it at once, as "
                      "a supervisor does. Crash attribution: at the first crash every "
                      "message in hand counts one return and none is dead-lettered for it; "
                      "from then on the poison is handed out alone and is the culprit.")

    def start(self, run):
        self.crashes = 0
        super().start(run)

    def poll(self, run):
        code = self.process.poll()
        if code is None:
            return True
        run.exit_codes.append(code)
        if code != CRASH_EXIT_CODE:
            run.errors.append(f"{self.name} exited with code {code}, not the crash's "
                              f"{CRASH_EXIT_CODE}")
            return False
        self.crashes += 1
        if self.crashes > MAX_RESTARTS:
            run.errors.append(f"{self.name} crashed {self.crashes} times")
            return False
        self.process = run.spawn(self.argv(run), self.cwd())  # the supervisor's restart
        return True

    def check_run(self, result, run, broker, counts, check):
        super().check_run(result, run, broker, counts, check)
        good_dead = [label for label in result["dead_letters"] if label in GOOD]
        check("no good message dead-lettered (crash attribution, prefetch 10)", not good_dead,
              f"good messages in the DLQ: {good_dead or 'none'}; returns counted: "
              f"{int((result['metrics'] or {}).get('returns_total', 0))}")
        crashed_on = [words[1] for words in run.events() if words[0] == "crash"]
        check("the consumer crashed on the poison alone, once per delivery",
              crashed_on == [POISON] * counts["deliveries"].get(POISON, 0),
              f"{self.crashes} crashes (on {sorted(set(crashed_on))}), "
              f"{run.processes} processes")


class GetPoller(LanguageScenario):
    mode = "get"
    scenario = "basic.get poller, basic.reject(requeue=true)"
    gives_back = "basic.reject(requeue=true), on a message from basic.get"
    scenario_notes = ("A poller that calls basic.get in a loop (20 ms apart while the queue "
                      "is empty) and rejects the poison with requeue. nackguard answers "
                      "basic.get-empty to a basic.get whose message it takes over: every "
                      f"basic.get must be answered, none may wait {GET_ANSWER_SECONDS:.0f} s.")

    def start(self, run):
        self.waiting = None  # (the unanswered basic.get's number, since when)
        super().start(run)

    @staticmethod
    def gets(events):
        """{number: answered?} of the poller's basic.get calls."""
        calls = {}
        for words in events:
            if words[0] == "get":
                calls[words[1]] = False
            elif words[0] in ("empty", "got"):
                calls[words[1]] = True
        return calls

    def poll(self, run):
        if not super().poll(run):
            return False
        open_calls = [n for n, answered in self.gets(run.events()).items() if not answered]
        if not open_calls:
            self.waiting = None
        elif self.waiting is None or self.waiting[0] != open_calls[-1]:
            self.waiting = (open_calls[-1], time.monotonic())
        elif time.monotonic() - self.waiting[1] > GET_ANSWER_SECONDS:
            run.errors.append(f"basic.get #{self.waiting[0]} unanswered for "
                              f"{GET_ANSWER_SECONDS:.0f} s: the poller hangs")
            return False
        return True

    def check_run(self, result, run, broker, counts, check):
        super().check_run(result, run, broker, counts, check)
        events = run.events()
        calls = self.gets(events)
        unanswered = [n for n, answered in calls.items() if not answered]
        # A poller ended by SIGTERM's default action (php-amqp) may die inside its last call.
        if self.language.sigterm_exit_code != 0 and unanswered == list(calls)[-1:]:
            unanswered = []
        answers = [words[0] for words in events if words[0] in ("got", "empty")]
        check("every basic.get answered (get-ok or get-empty)", not unanswered,
              f"{len(calls)} basic.get, {answers.count('got')} get-ok, "
              f"{answers.count('empty')} get-empty, unanswered: {unanswered or 'none'}")


class Reconnect(LanguageScenario):
    mode = "reconnect"
    scenario = "its own reconnect after the broker closed its connection"
    gives_back = "basic.nack(requeue=true)"
    scenario_notes = ("good-00 .. good-09 first; once they are acked, `rabbitmqctl "
                      "close_connection` closes nackguard's upstream connection (the one with "
                      "the client's connection_name), nackguard closes the client's with 320, "
                      "and the client reconnects by its own means (below); then the rest, "
                      "the poison among them, published once it consumes again.")

    def publish(self, broker, queue):
        self.broker, self.phase, self.closed = broker, "before the close", []
        publish_labels(broker, queue, FIRST_BATCH)

    def poll(self, run):
        if not super().poll(run):
            return False
        events = run.events()
        acked = {words[1] for words in events if words[0] == "ack" and len(words) > 1}
        if self.phase == "before the close" and acked >= set(FIRST_BATCH):
            self.closed = close_broker_connections(connection_name(run.queue),
                                                   "compat: reconnect scenario")
            if not self.closed:
                run.errors.append(f"the broker has no connection named "
                                  f"{connection_name(run.queue)!r} to close")
                return False
            self.phase = "closed"
        elif self.phase == "closed" and sum(1 for w in events if w[0] == "start") >= 2:
            publish_labels(self.broker, run.queue, SECOND_BATCH)
            self.phase = "after the reconnect"
        return True

    def check_run(self, result, run, broker, counts, check):
        super().check_run(result, run, broker, counts, check)
        events = run.events()
        starts = sum(1 for words in events if words[0] == "start")
        lost = [" ".join(words[1:]) for words in events if words[0] == "lost"]
        library = [" ".join(words[1:]) for words in events
                   if words[0] == "library" and "connection.close" in " ".join(words)]
        why = "; ".join(text for text in lost + library if text)
        check("one close by the broker, then the client's own reconnect through nackguard",
              len(self.closed) == 1 and lost and starts == 2
              and self.phase == "after the reconnect",
              f"{len(self.closed)} broker connection closed; the client saw "
              f"{why or 'no loss'} ({len(lost)} reconnect attempts), consumed {starts} times")


class Traffic(LanguageScenario):
    mode = "traffic"
    scenario = "common API, directly and through nackguard"
    gives_back = "nothing (no poison here)"
    expect_bounded = False
    expected_reason = None
    scenario_notes = ("The client declares the queue, publishes 10 messages with every "
                      "basic property and a header table under publisher confirms, takes one "
                      "with basic.get, sets basic.qos 5, consumes the other 9 acking every "
                      "third with multiple=true, cancels, gets basic.get-empty and reads the "
                      "queue's counts: first directly against the broker, then through "
                      "nackguard. Its transcript (every reply and delivery as the client "
                      "decodes it) must be the same.")

    def publish(self, broker, queue):
        pass  # the client publishes, with confirms

    def start(self, run):
        self.language.prepare()
        self.done = False
        self.direct_events = os.path.join(run.dir, "direct-events.log")
        self._spawn(run, "direct")

    def _spawn(self, run, target):
        self.target = target
        overrides = [] if target == "nackguard" else [
            f"COMPAT_URL=amqp://guest:guest@{harness.BROKER_HOST}:{harness.BROKER_PORT}/%2F",
            f"COMPAT_EVENTS={self.direct_events}"]
        self.process = run.spawn(["env", *overrides, *self.argv(run)], self.cwd())

    def poll(self, run):
        if self.done:
            return True
        code = self.process.poll()
        if code is None:
            return True
        run.exit_codes.append(code)
        if code != 0:
            run.errors.append(f"{self.name}, {self.target}: exited with code {code}")
            return False
        if self.target == "direct":
            self._spawn(run, "nackguard")
        else:
            self.done = True
        return True

    def goal_reached(self, run, counts):
        return self.done

    def stop(self, run):
        if not self.done:
            stop_process(self.process, run, expect_code=None, what=f"{self.name} ({self.target})")

    def check_run(self, result, run, broker, counts, check):
        direct = [words for words in read_events(self.direct_events) if words[0] == "t"]
        proxied = [words for words in run.events() if words[0] == "t"]
        differ = next((i for i, (a, b) in enumerate(zip(direct, proxied)) if a != b),
                      None if len(direct) == len(proxied) else min(len(direct), len(proxied)))
        deliveries = sum(1 for words in proxied if words[1] == "deliver")
        complete = deliveries == 9 and proxied and proxied[-1][1] == "left"
        detail = f"{len(proxied)} steps, {deliveries} deliveries"
        if differ is not None:
            line = lambda t: " ".join(t[differ]) if differ < len(t) else "(nothing)"  # noqa: E731
            detail += f"; step {differ + 1}: directly `{line(direct)}`, through nackguard " \
                      f"`{line(proxied)}`"
        check("what the client sees is the same directly and through nackguard",
              differ is None and complete, detail)
        result["summary"] = (f"{len(proxied)} steps, " + (
            "the same directly and through nackguard" if differ is None and complete
            else "**different** through nackguard" if differ is not None else "incomplete"))


SCENARIOS = [ConsumeNack, ConsumeReject, CrashLoop, GetPoller, Reconnect, Traffic]
