"""The ledger test's checker: accounts for every confirmed id at the end of a run, from the
publisher's Ledger, the consumers' own event logs, what was found in the DLQ (and left in any
queue), the nemesis's log and the sidecars' logs. Pure: it reads, it returns a Verdict.

What fails a run:
  lost                confirmed, never acked by a consumer and not in the DLQ
  innocent            a good message in the DLQ
  stranded            confirmed, neither acked nor dead-lettered, but still in a queue after
                      the drain deadline
  inexact             a poison that the counting model says is counted exactly
                      (docs/choosing-a-policy.md, "How nackguard counts") delivered more than
                      max_redeliveries + 1 times
  looped              any poison delivered more than 3 x (max_redeliveries + 1) times
  unknown             an id nobody published
  copy-id             one x-nackguard-copy-id on two different copies, of one message or of
                      two (ledger_copy_ids.py); no documented exception covers it

Which poisons the exactness claim does not cover ("Where the count is not exact"), worked out
from the events:
  sidecar kill        a sidecar that delivered it was killed (kill -9) between that delivery
                      and the next one of the message (the message, or the copy the sidecar
                      was making of it, was in its hands)
  duplicated          it is in the DLQ more than once, or a delivery carries a smaller
                      x-nackguard-returns than an earlier one (a copy was confirmed and its
                      original's ack lost), and a sidecar was killed or a node stopped while
                      it was being delivered (the ack lost "with the sidecar or the
                      connection"); a duplicate without such a fault is reported as
                      unexplained, and its count is held to the model
  crash takeover      a crash of it whose take-over a node stop crossed (the broker closed
                      the connection: "a crash return that cannot be taken over")
  fallback            the sidecar that took its return logged a fallback (a copy that could not
                      be made) while that return was under way
A crash-poison whose first crashes held a prefetch is covered: the docs say exactly
max_redeliveries + 1 from max_redeliveries 2 on, and the policy here has 3.
"""

import collections
import datetime

import ledger_copy_ids
from ledger_plan import CRASH, GOOD, is_poison, kind_of

FALLBACK_LOG_INTERVAL = 10.0  # s: one fallback line per queue and cause in this long


class Inputs:
    """What the checker reads. `events`: every consumer event (ledger_workers.read_events);
    `dlq`, `left`: lists of (id, headers, redelivered) drained at the end; `nemesis_log`:
    ledger_nemesis.Nemesis.log; `sidecar_of`: consumer name -> sidecar name; `sidecar_logs`:
    sidecar name -> its log's text; `t0`, `t_end`: wall clock of the run's start and end."""

    def __init__(self, settings, ledger, events, dlq, left, nemesis_log, sidecar_of,
                 sidecar_logs, t0, t_end):
        self.settings = settings
        self.ledger = ledger
        self.events = events
        self.dlq = dlq
        self.left = left
        self.nemesis_log = nemesis_log
        self.sidecar_of = sidecar_of
        self.sidecar_logs = sidecar_logs
        self.t0 = t0
        self.t_end = t_end


class PoisonRecord:
    def __init__(self, msg_id):
        self.id = msg_id
        self.kind = kind_of(msg_id)
        self.receipts = []     # recv events, in time order
        self.dead_letters = []  # headers of each DLQ copy
        self.exceptions = []   # why the exactness claim does not cover it
        self.unexplained_duplicate = None  # duplicated with no kill or node stop to explain it
        self.failure = None

    @property
    def deliveries(self):
        return len(self.receipts)

    @property
    def exact(self):
        return not self.exceptions


class Verdict:
    def __init__(self):
        self.counts = {}
        self.failures = []        # (kind, id, text)
        self.poisons = []         # PoisonRecords
        self.duplicates = {}      # id -> acks
        self.reused_copy_ids = {}  # copy id -> [ledger_copy_ids.Sighting of each copy]
        self.events_by_id = collections.defaultdict(list)

    @property
    def passed(self):
        return not self.failures


# ---------------------------------------------------------------- timelines

def _parse_log_time(line):
    try:
        return datetime.datetime.strptime(line[:23], "%Y-%m-%dT%H:%M:%S.%f").timestamp()
    except ValueError:
        return None


def _fallback_times(sidecar_logs):
    """sidecar name -> wall times of its `fallback:` lines."""
    out = {}
    for name, text in sidecar_logs.items():
        out[name] = [t for t in (_parse_log_time(line) for line in text.splitlines()
                                 if " fallback: " in line) if t is not None]
    return out


def _kills(nemesis_log):
    """[(wall time, sidecar name)] of the sidecar kills."""
    return [(e["detail"]["killed"], e["detail"]["sidecar"]) for e in nemesis_log
            if e["action"] == "kill_sidecar" and isinstance(e["detail"], dict)]


def _node_stops(nemesis_log):
    """[(from, to, node)]: the stop_app call, during which the node closes its connections
    (after it, new connections go to the other nodes)."""
    out = []
    for e in nemesis_log:
        if e["action"] == "stop_node":
            detail = e["detail"] if isinstance(e["detail"], dict) else {}
            out.append((e["begin"], detail.get("down", e["end"]),
                        detail.get("node", f"node {e['target']}")))
    return out


# ---------------------------------------------------------------- poisons

def _returns_of(receipt):
    try:
        return int(receipt.get("h", {}).get("x-nackguard-returns", 0))
    except (TypeError, ValueError):
        return 0


def _count_went_back(receipts):
    """Whether a delivery carries a smaller x-nackguard-returns than an earlier one: an older
    copy (or the original) still existed beside a newer copy."""
    highest = 0
    for receipt in receipts:
        returns = _returns_of(receipt)
        if returns < highest:
            return True
        highest = max(highest, returns)
    return False


def _wall_time(value):
    """A header's time (pika: a datetime in UTC for a timestamp, or a number of ms or s)."""
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.timezone.utc)
        return value.timestamp()
    if isinstance(value, (int, float)) and value > 0:
        return value / 1000.0 if value > 1e11 else float(value)
    return None


def _settled_by(record, inputs):
    """When its last delivery was over: its dead-letter's x-nackguard-last-return (2 s more
    for the dead-letter's publish and confirm), else the end of the run."""
    times = [_wall_time(h.get("x-nackguard-last-return")) for h in record.dead_letters]
    times = [t for t in times if t is not None]
    return min(inputs.t_end, max(times) + 2.0) if times else inputs.t_end


def _duplication(record):
    if len(record.dead_letters) > 1:
        return f"in the DLQ {len(record.dead_letters)} times"
    if _count_went_back(record.receipts):
        return "a delivery carried a smaller x-nackguard-returns than an earlier one"
    return None


def _why_not_exact(record, inputs, kills, stops, fallbacks):
    reasons = []
    rel = lambda t: t - inputs.t0  # noqa: E731
    settled = _settled_by(record, inputs)
    duplication = _duplication(record)
    if duplication and record.receipts:
        # Documented only where an ack can have been lost: with a sidecar (kill -9) or with
        # the broker connection (a node stopping), while the message was being delivered.
        first = record.receipts[0]["t"]
        causes = [f"{name} killed +{rel(t):.1f}s" for t, name in kills if first <= t <= settled]
        causes += [f"{node} stopping +{rel(b):.1f}s" for b, d, node in stops
                   if b <= settled and d >= first]
        if causes:
            reasons.append(f"duplicated: {duplication} ({', '.join(causes)})")
        else:
            record.unexplained_duplicate = duplication
    for k, receipt in enumerate(record.receipts):
        start = receipt["t"]
        end = record.receipts[k + 1]["t"] if k + 1 < len(record.receipts) else settled
        sidecar = inputs.sidecar_of.get(receipt["c"])
        for killed, name in kills:
            if name == sidecar and start <= killed <= end:
                reasons.append(f"sidecar kill: {name} killed at +{rel(killed):.1f}s, between "
                               f"delivery {k + 1} (+{rel(start):.1f}s) and the next")
        if record.kind == CRASH:
            for begin, down, node in stops:
                if begin <= end and down >= start:
                    reasons.append(f"crash takeover: {node} stopping +{rel(begin):.1f}s.."
                                   f"+{rel(down):.1f}s, across crash {k + 1} "
                                   f"(+{rel(start):.1f}s)")
        for t in fallbacks.get(sidecar, []):
            if start - FALLBACK_LOG_INTERVAL <= t <= end:
                reasons.append(f"fallback: {sidecar} logged one at +{rel(t):.1f}s, near "
                               f"delivery {k + 1} (+{rel(start):.1f}s)")
                break
    return reasons


def _check_poisons(verdict, inputs, confirmed, dlq_headers):
    settings = inputs.settings
    kills, stops = _kills(inputs.nemesis_log), _node_stops(inputs.nemesis_log)
    fallbacks = _fallback_times(inputs.sidecar_logs)
    records = {}
    for msg_id in sorted(i for i in confirmed if is_poison(i)):
        records[msg_id] = PoisonRecord(msg_id)
    for event in inputs.events:
        if event["ev"] == "recv" and event.get("id") in records:
            records[event["id"]].receipts.append(event)
    for msg_id, headers in dlq_headers:
        if msg_id in records:
            records[msg_id].dead_letters.append(headers)
    for record in records.values():
        record.exceptions = _why_not_exact(record, inputs, kills, stops, fallbacks)
        if record.deliveries > settings.loop_bound:
            record.failure = (f"looped: delivered {record.deliveries} times, more than "
                              f"{settings.loop_bound}")
        elif record.exact and record.deliveries > settings.exact_bound:
            record.failure = (f"inexact: delivered {record.deliveries} times, the model says "
                              f"exactly {settings.exact_bound}")
            if record.unexplained_duplicate:
                record.failure += (f" (duplicated with no sidecar kill or node stop to "
                                   f"explain it: {record.unexplained_duplicate})")
        if record.failure:
            verdict.failures.append((record.failure.split(":")[0], record.id, record.failure))
    verdict.poisons = list(records.values())


# ---------------------------------------------------------------- the account

def check(inputs):
    verdict = Verdict()
    ledger = inputs.ledger
    acked = collections.Counter()
    for event in inputs.events:
        if event.get("id") is not None:
            verdict.events_by_id[event["id"]].append(event)
        if event["ev"] == "ack":
            acked[event["id"]] += 1
            ledger.consume(event["id"])
        elif event["ev"] in ("nack", "reject"):
            ledger.returned(event["id"])
    dlq_ids = collections.Counter(msg_id for msg_id, _, _ in inputs.dlq)
    left_ids = collections.Counter(msg_id for msg_id, _, _ in inputs.left)
    account = ledger.account(dlq=dlq_ids, queued=left_ids)
    confirmed = set(ledger.confirmed)
    published = set(ledger.published)

    lost = sorted(confirmed - set(acked) - set(dlq_ids) - set(left_ids))
    stranded = sorted((confirmed & set(left_ids)) - set(acked) - set(dlq_ids))
    innocent = sorted(i for i in dlq_ids if kind_of(i) == GOOD)
    unknown = sorted((set(acked) | set(dlq_ids) | set(left_ids)) - published)
    verdict.duplicates = {i: n for i, n in acked.items() if n > 1}
    for kind, ids in (("lost", lost), ("stranded", stranded), ("innocent", innocent),
                      ("unknown", unknown)):
        for msg_id in ids:
            verdict.failures.append((kind, msg_id, kind))
    _check_poisons(verdict, inputs, confirmed, [(i, h) for i, h, _ in inputs.dlq])
    verdict.reused_copy_ids, copy_ids = ledger_copy_ids.reused_copy_ids(
        inputs.events, inputs.dlq, inputs.left)
    verdict.failures += ledger_copy_ids.failures(verdict.reused_copy_ids, inputs.t0)

    exact = [p.deliveries for p in verdict.poisons if p.exact]
    excepted = [p.deliveries for p in verdict.poisons if not p.exact]
    verdict.counts = {
        "published": account["published"], "confirmed": account["confirmed"],
        "in_doubt": account["in_doubt"], "in_doubt_found": account["in_doubt_found"],
        "nacked_by_broker": account["nacked_by_broker"],
        "acked": len(acked), "acks": sum(acked.values()),
        "dead_lettered": sum(dlq_ids.values()), "left_in_queues": sum(left_ids.values()),
        "lost": len(lost), "stranded": len(stranded), "innocent_dead_lettered": len(innocent),
        "unknown": len(unknown), "duplicates": sum(n - 1 for n in verdict.duplicates.values()),
        "poisons": len(verdict.poisons), "poisons_exact": len(exact),
        "poisons_excepted": len(excepted),
        "max_deliveries_exact": max(exact, default=0),
        "max_deliveries_excepted": max(excepted, default=0),
        "receipts": sum(1 for e in inputs.events if e["ev"] == "recv"),
        "copy_ids": copy_ids, "copy_ids_reused": len(verdict.reused_copy_ids),
        "unexplained_duplicates": sum(1 for p in verdict.poisons if p.unexplained_duplicate),
    }
    return verdict
