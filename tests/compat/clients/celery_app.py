"""Compatibility client: a real Celery worker (Debian's python3-celery, py-amqp transport).

The worker runs with task_acks_late=True, so a message is acked only when its task returns,
and the task raises celery.exceptions.Reject(requeue=True) on the poison: the worker then sends
basic.reject(requeue=true), the loop Celery users hit with acks_late. Celery's message
protocol 2 carries the task id in the `id` header (nackguard's default identity reads it).

Started by tests/compat/compat.py as
  python3 -m celery -A celery_app worker --pool=solo -Q QUEUE ...
with COMPAT_CELERY_BROKER (the proxy), COMPAT_QUEUE, COMPAT_POISON and COMPAT_EVENTS set.
The suite also imports it (with the broker's own URL) to publish the tasks.
"""

import os

from celery import Celery
from celery.exceptions import Reject

from events import Events

TASK_NAME = "compat.process"

app = Celery("nackguard_compat", broker=os.environ.get("COMPAT_CELERY_BROKER"))
app.conf.update(
    task_acks_late=True,
    task_default_queue=os.environ.get("COMPAT_QUEUE", "celery"),
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
