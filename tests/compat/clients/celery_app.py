"""Compatibility client: a real Celery worker (Debian's python3-celery, py-amqp transport).

The worker runs with task_acks_late=True, so a message is acked only when its task returns,
and the task raises celery.exceptions.Reject(requeue=True) on the poison: the worker then sends
basic.reject(requeue=true), the loop Celery users hit with acks_late. Celery's message
protocol 2 carries the task id in the `id` header (nackguard's default identity reads it).

Started by tests/compat/compat.py as
  python3 -m celery -A celery_app worker --pool=solo -Q QUEUE ...
with COMPAT_CELERY_BROKER (the proxy), COMPAT_QUEUE, COMPAT_POISON, COMPAT_EVENTS and
COMPAT_QUEUE_TYPE set. The suite also imports it (with the broker's own URL) to publish the
tasks.

On a quorum queue (COMPAT_QUEUE_TYPE=quorum) the app does what a Celery 5.2 user must do:
  * it declares the queue with x-queue-type quorum (task_queues), or RabbitMQ refuses the
    worker's and the publisher's queue.declare (PRECONDITION_FAILED, inequivalent arg);
  * it turns off global QoS. Celery 5.2 sends basic.qos(global=true) to RabbitMQ, and a
    quorum queue refuses a consumer on such a channel (NOT_IMPLEMENTED, "does not support
    global qos"). Celery 5.5 does the same itself (worker_detect_quorum_queues).
"""

import os

from celery import Celery
from celery.exceptions import Reject
from kombu import Exchange, Queue

from events import Events

TASK_NAME = "compat.process"


def task_queues(name, queue_type):
    """The queue Celery would create for `-Q name` (celery.app.amqp.Queues.new_missing), with
    x-queue-type quorum when asked; None (Celery's own default) for a classic queue."""
    if queue_type != "quorum":
        return None
    return [Queue(name, Exchange(name), name, queue_arguments={"x-queue-type": "quorum"})]


def without_global_qos():
    """basic.qos(global=false), as Celery 5.5 sends for quorum queues: kombu then reports
    RabbitMQ's QoS semantics as the spec's, and Celery's task consumer stops asking for
    global QoS (celery/worker/consumer/tasks.py: qos_global)."""
    from kombu.transport import pyamqp
    pyamqp.Transport.qos_semantics_matches_spec = lambda self, connection: True


QUEUE_TYPE = os.environ.get("COMPAT_QUEUE_TYPE", "classic")
if QUEUE_TYPE == "quorum":
    without_global_qos()

app = Celery("nackguard_compat", broker=os.environ.get("COMPAT_CELERY_BROKER"))
app.conf.update(
    task_acks_late=True,
    task_default_queue=os.environ.get("COMPAT_QUEUE", "celery"),
    task_queues=task_queues(os.environ.get("COMPAT_QUEUE", "celery"), QUEUE_TYPE),
    worker_prefetch_multiplier=4,
    # A lost broker connection is a finding here, not something to retry past silently.
    broker_connection_retry=False,
    broker_connection_max_retries=0,
    worker_hijack_root_logger=True,
)

_events = None


def events():
    global _events
    if _events is None:
        _events = Events(os.environ["COMPAT_EVENTS"])
    return _events


@app.task(name=TASK_NAME, bind=True)
def process(self, label):
    redelivered = int(bool((self.request.delivery_info or {}).get("redelivered")))
    events().write("deliver", label, redelivered)
    if label == os.environ["COMPAT_POISON"]:
        events().write("return", label)
        raise Reject(f"{label}: cannot be processed", requeue=True)
    events().write("ack", label)  # acks_late: the worker acks once this returns
    return label
