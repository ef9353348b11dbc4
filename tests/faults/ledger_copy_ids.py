"""The ledger checker's copy-id rule: no x-nackguard-copy-id may be carried by two different
copies, of one message or of two. The README's headers table says the id is "which copy this
is (random)", and a sidecar's tracker entry is matched to a copy by it
(docs/choosing-a-policy.md, "What the message carries"): two copies with one id would let a
sidecar's count of one be applied to the other.

A copy is one message nackguard published. It may be delivered several times (the broker
redelivers it after a forwarded return, a crash, a lost connection; a delayed copy comes back
from its delay queue) and always carries the same headers, which nackguard wrote once, when it
made the copy. So copies are told apart by:
  where        a dead letter (found in the DLQ) is a copy of its own; what consumers received
               and what was left in the queue or its delay queues came from the queue
  the message  its message_id
  the headers  the x-nackguard-* headers written with the copy (returns, deliveries,
               suspect, exact, first return, returns-queue; a dead letter's reason, times,
               consumer): two deliveries of one copy carry the same ones

Two dead letters with the same id are two copies even if every header is the same (each
basic.get took its own message). Two deliveries of the same message with the same id and the
same headers cannot be told from one copy delivered twice: that case is not reported (no
false alarm), the others are. No documented exception covers an id on two copies (ids are
drawn at random for each copy, from 64 bits: a collision in a run is below 1e-12), so every
finding fails the run.
"""

import collections
import datetime

COPY_ID = "x-nackguard-copy-id"


def _plain(value):
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, datetime.datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    return str(value)


def _signature(headers):
    return tuple(sorted((k, _plain(v)) for k, v in headers.items()
                        if k.startswith("x-nackguard-") and k != COPY_ID))


class Sighting:
    """One place a copy id was seen: `where` 'queue' (a consumer's receipt, or left in a
    queue) or 'dlq'; `what` says which, for the report."""

    def __init__(self, copy_id, msg_id, where, headers, what, t=None):
        self.copy_id = copy_id
        self.msg_id = msg_id
        self.where = where
        self.signature = _signature(headers)
        self.returns = headers.get("x-nackguard-returns")
        self.suspect = bool(headers.get("x-nackguard-suspect"))
        self.exact = bool(headers.get("x-nackguard-exact"))
        self.what = what
        self.t = t

    def describe(self, t0):
        when = f" +{self.t - t0:.2f}s" if self.t is not None else ""
        flags = "".join(f for f, on in (("S", self.suspect), ("E", self.exact)) if on)
        return f"{self.msg_id} {self.what}{when} returns={self.returns}{flags and ' ' + flags}"


def sightings(events, dlq, left):
    """Every sighting of a copy id: consumers' receipts, dead letters, what was left."""
    out = []
    for event in events:
        if event["ev"] != "recv":
            continue
        headers = event.get("h") or {}
        if headers.get(COPY_ID) is not None:
            out.append(Sighting(_plain(headers[COPY_ID]), event.get("id"), "queue", headers,
                                f"recv by {event.get('c')}", event["t"]))
    for k, (msg_id, headers, _rd) in enumerate(dlq):
        if headers.get(COPY_ID) is not None:
            out.append(Sighting(_plain(headers[COPY_ID]), msg_id, "dlq", headers,
                                f"dead letter #{k + 1}"))
    for msg_id, headers, _rd in left:
        if headers.get(COPY_ID) is not None:
            out.append(Sighting(_plain(headers[COPY_ID]), msg_id, "queue", headers, "left"))
    return out


def reused_copy_ids(events, dlq, left):
    """{copy id: [Sighting of each distinct copy that carried it]} for every id that two or
    more distinct copies carried; and the number of distinct ids seen."""
    copies = collections.defaultdict(dict)  # id -> copy key -> first sighting
    dead_letters = collections.defaultdict(list)
    for s in sightings(events, dlq, left):
        if s.where == "dlq":
            dead_letters[s.copy_id].append(s)
            key = ("dlq", len(dead_letters[s.copy_id]))
        else:
            key = ("queue", s.msg_id, s.signature)
        copies[s.copy_id].setdefault(key, s)
    reused = {cid: list(found.values()) for cid, found in copies.items() if len(found) > 1}
    return reused, len(copies)


def failures(reused, t0):
    """(kind, message id, text) for each reused id: one failure per id, under the first
    message that carried it."""
    out = []
    for copy_id, found in sorted(reused.items(), key=lambda kv: kv[1][0].msg_id or ""):
        ids = sorted({s.msg_id or "?" for s in found})
        scope = "one message" if len(ids) == 1 else f"{len(ids)} messages"
        text = (f"copy-id reused: x-nackguard-copy-id {copy_id} on {len(found)} different "
                f"copies ({scope}): " + "; ".join(s.describe(t0) for s in found))
        out.append(("copy-id", ids[0], text))
    return out
