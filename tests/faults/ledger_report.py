"""The ledger test's printed report: the run's settings and schedule, the account, each
poison's deliveries (exact ones, and excepted ones with why), and for every failure the id's
events, its dead-letters and the sidecars' log lines that name it. Also the one-line row of
the results table (faults-results/results.jsonl)."""

from ledger_nemesis import describe_event

MAX_DETAILED_FAILURES = 25


def _short(value):
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    text = str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _headers(headers):
    keep = {k.replace("x-nackguard-", "ng-"): _short(v) for k, v in sorted(headers.items())
            if k in ("x-nackguard-returns", "x-nackguard-reason", "x-nackguard-copy-id",
                     "x-nackguard-suspect", "x-nackguard-deliveries", "x-delivery-count",
                     "x-acquired-count", "x-nackguard-returns-queue")}
    return " ".join(f"{k}={v}" for k, v in keep.items()) or "-"


def _event_line(event, inputs):
    rel = event["t"] - inputs.t0
    sidecar = inputs.sidecar_of.get(event.get("c"), "?")
    extra = ""
    if event["ev"] == "recv":
        extra = f" redelivered={int(event.get('rd', False))} {_headers(event.get('h', {}))}"
    return f"      +{rel:7.2f}s {event.get('c', '?')}@{sidecar} pid={event.get('pid')} " \
           f"{event['ev']}{extra}"


def _trail(receipt, inputs):
    """One delivery, compactly: sidecar, R when redelivered, the copy's last 4 hex digits
    (o: the original), its x-nackguard-returns."""
    headers = receipt.get("h", {})
    copy_id = str(headers.get("x-nackguard-copy-id", ""))
    return (f"{inputs.sidecar_of.get(receipt['c'], '?')[-1]}{'R' if receipt.get('rd') else ''}"
            f"/{copy_id[-4:] or 'o'}/{headers.get('x-nackguard-returns', '-')}")


def _poison_line(record, inputs):
    path = " ".join(_trail(r, inputs) for r in record.receipts)
    dl = record.dead_letters
    dl_text = (f"dlq x{len(dl)} returns={_short(dl[0].get('x-nackguard-returns', '-'))} "
               f"reason={_short(dl[0].get('x-nackguard-reason', '-'))}") if dl else "not in dlq"
    state = "exact" if record.exact else "excepted"
    line = (f"    {record.id:14} {record.deliveries:3} deliveries [{path}] {dl_text}; "
            f"{state}")
    if record.failure:
        line += f"  FAIL {record.failure}"
    for reason in record.exceptions:
        line += f"\n        why not exact: {reason}"
    if record.unexplained_duplicate:
        line += (f"\n        duplicated with no sidecar kill or node stop while it was "
                 f"delivered (not a documented exception): {record.unexplained_duplicate}")
    return line


def _failure_details(verdict, inputs):
    lines = []
    dlq_by_id = {}
    for msg_id, headers, rd in inputs.dlq:
        dlq_by_id.setdefault(msg_id, []).append((headers, rd))
    for kind, msg_id, text in verdict.failures[:MAX_DETAILED_FAILURES]:
        lines.append(f"  {kind}: {msg_id}: {text}")
        for event in verdict.events_by_id.get(msg_id, []):
            lines.append(_event_line(event, inputs))
        for headers, rd in dlq_by_id.get(msg_id, []):
            lines.append(f"      in DLQ: redelivered={int(bool(rd))} {_headers(headers)} "
                         f"first={_short(headers.get('x-nackguard-first-return', '-'))} "
                         f"last={_short(headers.get('x-nackguard-last-return', '-'))} "
                         f"consumer={_short(headers.get('x-nackguard-consumer', '-'))}")
        for name, text_log in sorted(inputs.sidecar_logs.items()):
            for line in text_log.splitlines():
                if f"message_id:{msg_id}" in line:
                    lines.append(f"      {name} log: {line}")
    if len(verdict.failures) > MAX_DETAILED_FAILURES:
        lines.append(f"  ... and {len(verdict.failures) - MAX_DETAILED_FAILURES} more")
    return lines


def render(verdict, inputs, schedule, sidecars, nemesis, extra):
    """The whole report, as text. `extra`: {name: value} of the run's other figures."""
    settings = inputs.settings
    c = verdict.counts
    out = [f"===== ledger run seed={settings.seed} =====", f"  {settings.describe()}",
           "  schedule:"]
    out += [f"    {describe_event(e, sidecars)}" for e in schedule]
    out.append("  carried out:")
    for entry in sorted(nemesis.log, key=lambda e: e["begin"]):
        out.append(f"    +{entry['begin'] - inputs.t0:6.1f}s..+{entry['end'] - inputs.t0:6.1f}s "
                   f"{entry['action']} {entry['target']}: {_short(entry['detail'])}")
    out += [f"  nemesis errors: {err}" for err in nemesis.errors]
    out.append(f"  published={c['published']} confirmed={c['confirmed']} "
               f"(in doubt {c['in_doubt']}, {c['in_doubt_found']} of them found; "
               f"nacked by the broker {c['nacked_by_broker']}) acked={c['acked']} "
               f"(acks {c['acks']}) dead-lettered={c['dead_lettered']} "
               f"left in queues={c['left_in_queues']}")
    out.append(f"  lost={c['lost']} innocent dead-lettered={c['innocent_dead_lettered']} "
               f"stranded={c['stranded']} unknown={c['unknown']} "
               f"duplicates={c['duplicates']} ({len(verdict.duplicates)} ids acked twice or "
               f"more)")
    out.append(f"  poisons: {c['poisons']} ({c['poisons_exact']} exact, max deliveries "
               f"{c['max_deliveries_exact']}; {c['poisons_excepted']} excepted, max "
               f"{c['max_deliveries_excepted']}); the model's number: "
               f"{settings.exact_bound}, the loop bound: {settings.loop_bound}")
    for record in sorted(verdict.poisons, key=lambda r: (not r.failure, r.exact, r.id)):
        out.append(_poison_line(record, inputs))
    out.append(f"  copy ids seen: {c['copy_ids']}, carried by two or more different copies: "
               f"{c['copy_ids_reused']}; poisons duplicated with no fault to explain it: "
               f"{c['unexplained_duplicates']}")
    out.append("  " + " ".join(f"{k}={v}" for k, v in extra.items()))
    if verdict.failures:
        out.append(f"  FAILED: {len(verdict.failures)} findings")
        out += _failure_details(verdict, inputs)
    else:
        out.append("  PASSED: every confirmed id accounted for")
    return "\n".join(out)


def result_row(verdict, inputs, nemesis, wall_seconds):
    c = verdict.counts
    return {"seed": inputs.settings.seed, "long": inputs.settings.long,
            "rabbitmq": inputs.settings.version, "requeue": inputs.settings.requeue,
            "messages": c["confirmed"], "nemesis_events": len(nemesis.log),
            "nemesis": nemesis.summary(), "lost": c["lost"],
            "innocent_dead_lettered": c["innocent_dead_lettered"],
            "duplicates": c["duplicates"], "stranded": c["stranded"],
            "max_deliveries_exact": c["max_deliveries_exact"],
            "max_deliveries_excepted": c["max_deliveries_excepted"],
            "poisons_exact": c["poisons_exact"], "poisons_excepted": c["poisons_excepted"],
            "copy_ids_reused": c["copy_ids_reused"],
            "unexplained_duplicates": c["unexplained_duplicates"],
            "failures": len(verdict.failures),
            "failure_kinds": sorted({kind for kind, _, _ in verdict.failures}),
            "wall_seconds": round(wall_seconds, 1)}
