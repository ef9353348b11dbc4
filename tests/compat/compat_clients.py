"""The clients of the compatibility suite: how each one is started, stopped, versioned, and
what it is expected to show (tests/compat/compat.py runs them)."""

import json
import os
import subprocess
import uuid

import pika

from compat_common import (CLIENTS_DIR, GOOD, MAX_REDELIVERIES, MESSAGES, NODE_DIR, POISON,
                           PREFETCH, PYTHON, QUEUE_TYPE, STOP_GRACE, harness)


def debian_version(package):
    out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package],
                         capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else "not installed"


def python_module_version(module):
    out = subprocess.run([PYTHON, "-c", f"import {module}; print({module}.__version__)"],
                         capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else "not installed"


def publish_labels(broker, queue, labels):
    """Publishes a message per label (good-NN or poison), persistent, with a message_id of
    the label and a random suffix."""
    broker.publish(queue, [(label.encode(), pika.BasicProperties(
        message_id=f"{label}-{uuid.uuid4().hex[:8]}", content_type="text/plain",
        delivery_mode=2)) for label in labels])


def read_events(path):
    """The events a client program wrote to `path`, a list of words a line; [] before it
    wrote any."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [line.split() for line in f if line.strip()]


# ---------------------------------------------------------------- the clients


class Run:
    """One client's run: its queue, its proxy, its files."""

    def __init__(self, client, proxy, queue, work_dir):
        self.client = client
        self.proxy = proxy
        self.queue = queue
        self.dir = work_dir
        self.events_path = os.path.join(work_dir, "events.log")
        self.log_path = os.path.join(work_dir, "client.log")
        self.url = f"amqp://guest:guest@127.0.0.1:{proxy.port}/%2F"
        self.errors = []        # problems the client showed (exit codes, errors it reported)
        self.exit_codes = []    # of every process the client ran
        self.processes = 0

    def env(self):
        env = dict(os.environ)
        env.update(COMPAT_URL=self.url, COMPAT_QUEUE=self.queue, COMPAT_POISON=POISON,
                   COMPAT_EVENTS=self.events_path, COMPAT_PREFETCH=str(PREFETCH),
                   COMPAT_QUEUE_TYPE=QUEUE_TYPE,
                   PYTHONDONTWRITEBYTECODE="1",
                   COMPAT_CELERY_BROKER=f"amqp://guest:guest@127.0.0.1:{self.proxy.port}//")
        return env

    def spawn(self, argv, cwd):
        with open(self.log_path, "ab") as log:
            log.write(f"$ {' '.join(argv)}\n".encode())
            log.flush()
            self.processes += 1
            return subprocess.Popen(argv, cwd=cwd, env=self.env(), stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)

    def events(self):
        return read_events(self.events_path)

    def log_text(self):
        if not os.path.exists(self.log_path):
            return ""
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")


def stop_process(process, run, expect_code=0, what="client"):
    """SIGTERM, then SIGKILL after STOP_GRACE; records a wrong exit code as an error."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(STOP_GRACE)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            run.errors.append(f"{what} did not stop within {STOP_GRACE:.0f}s of SIGTERM")
    run.exit_codes.append(process.returncode)
    if expect_code is not None and process.returncode != expect_code:
        run.errors.append(f"{what} exited with code {process.returncode}")


class Client:
    """A client that runs as one long-lived process, stopped with SIGTERM at the end."""

    name = ""
    title = ""
    gives_back = ""          # how the client gives a failed message back
    expected_reason = "max_redeliveries"
    expect_bounded = True    # the poison is delivered 1 + max_redeliveries times, then DLQ'd
    notes = ""

    def poison_deliveries_ok(self, count):
        """Whether the poison was delivered as often as this client should have seen it."""
        return count == MAX_REDELIVERIES + 1, f"exactly {MAX_REDELIVERIES + 1}"

    def version(self):
        raise NotImplementedError

    def label_of(self, body):
        """The label (good-NN or poison) of a message body this client was sent."""
        return body.decode(errors="replace")

    def argv(self, run):
        raise NotImplementedError

    def cwd(self):
        return CLIENTS_DIR

    def publish(self, broker, queue):
        publish_labels(broker, queue, MESSAGES)

    def start(self, run):
        self.process = run.spawn(self.argv(run), self.cwd())

    def poll(self, run):
        """False once the client has ended by itself (an error)."""
        if self.process.poll() is not None:
            run.errors.append(f"client exited by itself with code {self.process.returncode}")
            return False
        return True

    def stop(self, run):
        stop_process(self.process, run)


class PikaClient(Client):
    name = "pika"
    title = "pika (Python, BlockingConnection)"
    gives_back = "basic.nack(requeue=true)"
    notes = "The consumer of tests/integration, and of most Python services."

    def version(self):
        return f"pika {python_module_version('pika')} (Debian python3-pika " \
               f"{debian_version('python3-pika')})"

    def argv(self, run):
        return [PYTHON, "pika_consumer.py"]


class AiormqClient(Client):
    name = "aiormq"
    title = "aiormq (Python asyncio)"
    gives_back = "basic.nack(requeue=true)"
    notes = "The protocol layer under aio-pika, used directly."

    def version(self):
        return f"aiormq {python_module_version('aiormq')}, pamqp " \
               f"{python_module_version('pamqp')} (Debian python3-aiormq " \
               f"{debian_version('python3-aiormq')})"

    def argv(self, run):
        return [PYTHON, "aiormq_consumer.py"]


class CeleryClient(Client):
    name = "celery"
    title = "Celery worker (acks_late, Reject(requeue=True))"
    gives_back = "basic.reject(requeue=true), from celery.exceptions.Reject(requeue=True)"
    notes = ("A real worker (`celery worker --pool=solo`, prefetch 4) with "
             "`task_acks_late=True`; the task raises `Reject(requeue=True)` on the poison. "
             "Celery's protocol 2 sets no message_id: nackguard's default identity finds the "
             "task id in the `id` header. The tasks are published with `send_task` straight "
             "to the broker. Seen here, with and without nackguard: when the failing task is "
             "the last message the worker holds, Celery 5.2 sends its reject (and the ack "
             "queued before it) only when its event loop next wakes, about 10 s later; that "
             "slows the loop down, it does not change the count. On a quorum queue the app "
             "declares the queue with `x-queue-type: quorum` (else RabbitMQ refuses Celery's "
             "own declare, PRECONDITION_FAILED) and asks for per-consumer QoS: Celery 5.2 "
             "sends `basic.qos(global=true)`, which a quorum queue refuses (NOT_IMPLEMENTED, "
             "\"does not support global qos\", directly and through nackguard alike); "
             "Celery 5.5 does the same by itself (`worker_detect_quorum_queues`).")

    def version(self):
        return (f"celery {python_module_version('celery')}, kombu "
                f"{python_module_version('kombu')}, py-amqp {python_module_version('amqp')} "
                f"(Debian python3-celery {debian_version('python3-celery')})")

    def argv(self, run):
        return [PYTHON, "-m", "celery", "-A", "celery_app", "worker", "--pool=solo",
                "--concurrency=1", "-Q", run.queue, "--loglevel=INFO", "--without-heartbeat",
                "--without-gossip", "--without-mingle",
                "-n", f"compat-{uuid.uuid4().hex[:6]}@localhost"]

    def label_of(self, body):
        args, _kwargs, _embed = json.loads(body)  # Celery's protocol 2 body
        return args[0]

    def publish(self, broker, queue):
        from celery import Celery  # the suite's own app object: publishes straight to the broker
        import celery_app
        app = Celery("nackguard_compat_publisher",
                     broker=f"amqp://guest:guest@127.0.0.1:{harness.BROKER_PORT}//")
        app.conf.task_queues = celery_app.task_queues(queue, QUEUE_TYPE)
        with app.connection_for_write() as connection:
            for label in MESSAGES:
                app.send_task(celery_app.TASK_NAME, args=[label], queue=queue,
                              connection=connection)


class AmqplibClient(Client):
    name = "amqplib"
    title = "amqplib (Node.js)"
    gives_back = "basic.reject(requeue=true)"
    notes = ("Installed from npm at the version pinned in tests/compat/node/package-lock.json "
             "by tests/compat/setup.sh.")

    def version(self):
        package = os.path.join(NODE_DIR, "node_modules", "amqplib", "package.json")
        try:
            with open(package) as f:
                amqplib = json.load(f)["version"]
        except OSError:
            amqplib = "not installed (run tests/compat/setup.sh)"
        node = subprocess.run(["node", "--version"], capture_output=True, text=True)
        return f"amqplib {amqplib}, Node.js {node.stdout.strip() or 'not installed'}"

    def argv(self, run):
        return ["node", os.path.join(NODE_DIR, "consumer.js")]

    def cwd(self):
        return NODE_DIR


class AmqpConsumeRestarted(Client):
    """amqp-consume -c 1 run again and again, as a supervisor (systemd Restart=always, a shell
    loop) would: each process takes one message and exits."""

    name = "amqp-consume"
    title = "amqp-consume (rabbitmq-c), restarted after each message"
    gives_back = ("nothing: a failing command leaves the message unacked; it goes back when "
                  "the process closes its channel")
    expected_reason = "crash_loop"
    notes = ("amqp-consume (Debian amqp-tools) cannot requeue: it acks a message when its "
             "command exits 0 and, when the command fails, sends nothing (no nack, no "
             "reject); the message stays unacked on the channel until the channel ends (with "
             "`--prefetch-count=1` the consumer then waits for ever: next row). Restarted "
             "after each message (`amqp-consume -c 1` under a supervisor), each process "
             "closes its channel on exit, RabbitMQ requeues what it held, and nackguard counts "
             "that as a return of a message held when its channel ended (the crash rule), so "
             "the poison is dead-lettered with reason `crash_loop`, not `max_redeliveries`, "
             "with returns 4. It may reach the command fewer than 4 times: `-c 1` also sets "
             "prefetch 1, so right after a process acks its one message RabbitMQ sends it the "
             "next one, which the process never reads before it closes; nackguard counts that "
             "unread delivery as a return too (it cannot tell it was not read: on the wire it "
             "looks exactly like a process that failed on it). That can land on the poison "
             "twice: behind good-09, and behind good-19 once the copy nackguard made at its "
             "second return (a copy made at a crash goes to the tail of the queue) waits "
             "there; so the command sees it 2, 3 or 4 times, as the processes' closes and "
             "RabbitMQ's sends fall. The next row, with the poison first, shows 4. Every "
             "message is "
             "counted about one such return (the returns column), so with amqp-consume -c 1, "
             "or any consumer that exits holding prefetched messages, keep "
             "`max_redeliveries` at 2 or more, or good messages may be dead-lettered.")

    def version(self):
        return f"amqp-tools {debian_version('amqp-tools')} (rabbitmq-c)"

    def poison_deliveries_ok(self, count):
        # Of the 4 returns nackguard counts (the dead letter's x-nackguard-returns, checked
        # exactly), up to two may be deliveries no process ever read (see the notes): the
        # read-ahead after good-09's ack, and the one after good-19's once the copy made at
        # the poison's second return went to the tail of the queue (docs/choosing-a-policy.md,
        # "How nackguard counts": copies made at a crash go to the queue's tail). On a classic
        # queue a third cannot: after that copy no good message is left behind it. On a
        # quorum queue the good messages' unread deliveries are republished to the tail too,
        # so one could come after it again; not seen in the runs measured (3.10.8, 4.0.5).
        # Whether each lands on the poison depends on whether the process closes before
        # RabbitMQ sends it.
        return (MAX_REDELIVERIES - 1 <= count <= MAX_REDELIVERIES + 1,
                f"{MAX_REDELIVERIES - 1} to {MAX_REDELIVERIES + 1}")

    def argv(self, run):
        return ["amqp-consume", "--url", run.url, "-q", run.queue, "-c", "1",
                os.path.join(CLIENTS_DIR, "amqp_consume_handler.sh")]

    def start(self, run):
        self.process = run.spawn(self.argv(run), CLIENTS_DIR)

    def poll(self, run):
        code = self.process.poll()
        if code is None:
            return True
        run.exit_codes.append(code)
        if code != 0:
            run.errors.append(f"amqp-consume exited with code {code}")
            return False
        self.process = run.spawn(self.argv(run), CLIENTS_DIR)  # the supervisor's restart
        return True

    def stop(self, run):
        # The last process waits for a message that will not come: the supervisor stops it.
        stop_process(self.process, run, expect_code=None)


class AmqpConsumePoisonFirst(AmqpConsumeRestarted):
    """The same supervisor loop with the poison published first: no process acks a message
    just before its first deliveries, so the read-ahead can land on it only once its copy
    waits at the tail of the queue behind the good messages."""

    name = "amqp-consume-poison-first"
    title = "amqp-consume (rabbitmq-c), restarted after each message, poison first"
    notes = ("The row above with the poison at the head of the queue (poison, good-00 .. "
             "good-19): the poison is dead-lettered (reason `crash_loop`, returns 4) and "
             "reaches the command 3 or 4 times. Its first return goes back to the head of the "
             "queue; from its second, nackguard's copy goes to the tail, behind the good "
             "messages, and the read-ahead after good-19's ack (see the row above) may land on "
             "it: a return the command never saw (about one run in ten here). The good "
             "messages still each count about one unread read-ahead return, below the limit.")

    def poison_deliveries_ok(self, count):
        # At most one unread read-ahead: after the copy at the tail no good message is left
        # behind the poison to be acked before it.
        return (MAX_REDELIVERIES <= count <= MAX_REDELIVERIES + 1,
                f"{MAX_REDELIVERIES} or {MAX_REDELIVERIES + 1}")

    def publish(self, broker, queue):
        publish_labels(broker, queue, [POISON] + GOOD)


class AmqpConsumeHeld(AmqpConsumeRestarted):
    """One long-running amqp-consume --prefetch-count=1: the poison is never given back."""

    name = "amqp-consume-held"
    title = "amqp-consume (rabbitmq-c), one long-running process, prefetch 1"
    expect_bounded = False
    expected_reason = None
    notes = ("What amqp-consume does on its own: the poison is delivered once and stays "
             "unacked; with prefetch 1 nothing more is delivered to that consumer, so the "
             "messages behind the poison wait. While the process lives no return reaches "
             "nackguard, so it has nothing to act on (and there is no loop either). When the "
             "process is stopped, RabbitMQ requeues the poison and nackguard counts one return "
             "(the crash rule); a restarted process gets it again (the row above).")

    def argv(self, run):
        return ["amqp-consume", "--url", run.url, "-q", run.queue, "--prefetch-count=1",
                os.path.join(CLIENTS_DIR, "amqp_consume_handler.sh")]

    def poll(self, run):
        return Client.poll(self, run)

    def stop(self, run):
        # SIGTERM kills amqp-consume (it has no handler): the TCP connection just ends.
        stop_process(self.process, run, expect_code=-15, what="amqp-consume")


# The legacy fleet's clients (Go, PHP, Ruby, Java): imported here, at the end, since they
# build on Client above.
from compat_languages import LANGUAGE_CLIENTS  # noqa: E402

CLIENTS = [PikaClient(), CeleryClient(), AiormqClient(), AmqplibClient(),
           AmqpConsumeRestarted(), AmqpConsumePoisonFirst(), AmqpConsumeHeld()] + LANGUAGE_CLIENTS
BY_NAME = {c.name: c for c in CLIENTS}
