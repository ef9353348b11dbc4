"""Waiting on a condition, the one way the tests do it: polling, with a deadline.

  wait_for(predicate, timeout, step)      polls predicate() until it returns a true value
                                          (which it returns) or `timeout` s pass (then it
                                          returns the last value it got)
  poll(fetch, condition, timeout, step)   calls fetch() until condition(value) holds or
                                          `timeout` s pass; returns the last value fetched, so
                                          that the caller's assertion shows what was there
  connection_failure(connection, errors, timeout)
                                          runs a pika connection's I/O loop until it raises
                                          one of `errors` or `timeout` s pass: (the error or
                                          None, the seconds it took)
Assert on what they return. poll and wait_for take sleep= (time.sleep by default): a pika
connection's sleep, e.g., keeps its I/O going between polls.
"""

import time


def poll(fetch, condition, timeout, step=0.05, sleep=time.sleep):
    deadline = time.monotonic() + timeout
    while True:
        value = fetch()
        if condition(value) or time.monotonic() >= deadline:
            return value
        sleep(step)


def wait_for(predicate, timeout, step=0.05, sleep=time.sleep):
    return poll(predicate, bool, timeout, step, sleep)


def connection_failure(connection, errors, timeout, step=0.05):
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        try:
            connection.process_data_events(time_limit=step)
        except errors as exc:
            return exc, time.monotonic() - start
    return None, time.monotonic() - start
