"""The randomized ledger test's settings (its environment, read once) and its seeded plan:
which messages are poison, and of which kind (test_ledger.py documents the variables).

A message's kind is part of its id, so that every process (the consumers, the checker) tells
it from the id alone:
  good-000123    acked
  nack-000124    a poison, always basic.nack(requeue=true)
  reject-000125  a poison, always basic.reject(requeue=true)
  crash-000126   a poison that kills the consumer process that receives it (os._exit)
"""

import os
import random
import sys

GOOD, NACK, REJECT, CRASH = "good", "nack", "reject", "crash"
POISON_KINDS = (NACK, REJECT, CRASH)
RETURNING_KINDS = (NACK, REJECT)  # the "nack-poison" of the brief: a requeue every time


def _flag(name):
    return os.environ.get(name, "") not in ("", "0")


def _choice(name, default, allowed):
    value = (os.environ.get(name) or default).strip().lower()
    if value not in allowed:
        sys.exit(f"ledger: {name}={value!r}: use {' or '.join(allowed)}")
    return value


def _seed():
    text = os.environ.get("NACKGUARD_LEDGER_SEED", "").strip()
    if not text:
        return random.SystemRandom().randrange(1, 2 ** 31)
    try:
        return int(text, 0)
    except ValueError:
        sys.exit(f"ledger: NACKGUARD_LEDGER_SEED={text!r}: give an integer")


class Settings:
    """One run's settings. `seed` decides the plan and the nemesis schedule."""

    def __init__(self):
        self.seed = _seed()
        self.long = _flag("NACKGUARD_LEDGER_LONG")
        self.version = _choice("NACKGUARD_LEDGER_VERSION",
                               os.environ.get("NACKGUARD_TEST_CLUSTER_VERSION") or "3.10",
                               ("3.10", "4.3"))
        self.requeue = _choice("NACKGUARD_LEDGER_REQUEUE", "immediate",
                               ("immediate", "delayed"))
        self.max_redeliveries = 3
        self.messages = int(os.environ.get("NACKGUARD_LEDGER_MESSAGES") or
                            (3000 if self.long else 1000))
        # short: 1% of each kind (10 returning poisons, 10 crashing); long: 30 poisons in all
        self.poisons_per_kind = 15 if self.long else max(1, self.messages // 100)
        self.consumers = 4
        self.prefetch = 10
        self.sidecars = 2
        # Seconds over which the publisher spreads its messages; the nemesis acts meanwhile.
        self.publish_seconds = 110.0 if self.long else 60.0
        self.drain_timeout = 300.0 if self.long else 150.0
        self.keep_dir = _flag("NACKGUARD_FAULTS_KEEP_TMP")

    @property
    def exact_bound(self):
        """Deliveries of a poison whose count the model says is exact."""
        return self.max_redeliveries + 1

    @property
    def loop_bound(self):
        """Deliveries no poison may pass, excepted or not: a bound, not a loop."""
        return 3 * (self.max_redeliveries + 1)

    def describe(self):
        return (f"seed={self.seed} long={int(self.long)} rabbitmq={self.version} "
                f"requeue={self.requeue} messages={self.messages} "
                f"poisons={self.poisons_per_kind} returning + {self.poisons_per_kind} crashing "
                f"max_redeliveries={self.max_redeliveries} consumers={self.consumers} "
                f"prefetch={self.prefetch} sidecars={self.sidecars}")


def kind_of(msg_id):
    return (msg_id or "").split("-", 1)[0]


def is_poison(msg_id):
    return kind_of(msg_id) in POISON_KINDS


def plan_messages(settings):
    """The ids to publish, in order: `messages` of them, the poisons at seeded places (none in
    the first 20, so that every consumer is up before the first crash), returning poisons
    alternating between nack and reject."""
    rng = random.Random(f"{settings.seed}/messages")
    n = settings.messages
    places = rng.sample(range(min(20, n // 2), n), 2 * settings.poisons_per_kind)
    kinds = {}
    for i, place in enumerate(places[:settings.poisons_per_kind]):
        kinds[place] = NACK if i % 2 == 0 else REJECT
    for place in places[settings.poisons_per_kind:]:
        kinds[place] = CRASH
    return [f"{kinds.get(i, GOOD)}-{i + 1:06d}" for i in range(n)]
