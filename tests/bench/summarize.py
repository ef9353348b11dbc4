#!/usr/bin/env python3
"""Medians and ratios of nackguard-bench runs, as Markdown tables.

    summarize.py RESULTS.jsonl [--idle-rss-kb KB] [--soak SOAK.tsv]

Reads the JSON lines compare.sh collected (label "scenario:target") and prints, per scenario
and target: median publish and consume rates with their ratio to direct (the ratio of the
medians, and in brackets the range of the per-round ratios), latency percentiles, and the
proxy's CPU seconds per 100k messages and per GiB of payload (both directions counted
together) and its peak RSS. The latency-paired scenario (label "latency-paired:all": every
target in one run) gets its own table, from each run's latency_by_target.
"""

import argparse
import json
import statistics
import sys
from collections import defaultdict

TARGETS = ["direct", "nackguard", "haproxy", "candidate", "floor"]


def json_lines(path):
    """The JSON objects of a file, one per line; other lines are skipped."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                yield json.loads(line)


def load(path):
    runs = defaultdict(lambda: defaultdict(list))  # scenario -> target -> [run]
    order = []
    for run in json_lines(path):
        scenario, _, target = run["label"].partition(":")
        if scenario not in order:
            order.append(scenario)
        runs[scenario][target].append(run)
    return order, runs


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def proxy_stat(run, key):
    """A figure of the first watched process (the proxy; the broker's comes second)."""
    pids = run.get("pids") or []
    if not pids or not pids[0]["ok"] or pids[0]["name"] == "beam.smp":
        return None
    return pids[0].get(key)


def user_per_100k(run):
    """The proxy's user-space CPU seconds per 100k messages (None from older runs)."""
    user = proxy_stat(run, "user_cpu_s")
    return None if user is None else user / run["messages"] * 1e5


def broker_stat(run, key):
    for p in run.get("pids") or []:
        if p["name"] == "beam.smp" and p["ok"]:
            return p[key]
    return None


def fmt(value, digits=0):
    if value is None:
        return "–"
    return f"{value:,.{digits}f}"


def ratio_text(runs, direct, key):
    if not direct:
        return "–"
    mine = median([r[key]["msg_per_s"] for r in runs if r["ok"]])
    base = median([r[key]["msg_per_s"] for r in direct if r["ok"]])
    if not mine or not base:
        return "–"
    pairs = [
        a[key]["msg_per_s"] / b[key]["msg_per_s"]
        for a, b in zip(runs, direct)
        if a["ok"] and b["ok"] and b[key]["msg_per_s"]
    ]
    spread = f" ({min(pairs):.2f}–{max(pairs):.2f})" if len(pairs) > 1 else ""
    return f"{mine / base:.2f}×{spread}"


def throughput_table(order, runs):
    print("| scenario | target | publish msg/s | × direct | consume msg/s | × direct |"
          " proxy CPU-s /100k msgs | CPU × haproxy | proxy CPU-s /GiB | proxy peak RSS MiB |"
          " broker CPU-s /100k | load avg | runs ok |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for scenario in order:
        if scenario in ("latency", "latency-paired", "soak"):
            continue
        direct = runs[scenario].get("direct", [])
        haproxy_cpu = median([proxy_stat(r, "cpu_s_per_100k")
                              for r in runs[scenario].get("haproxy", []) if r["ok"]])
        for target in TARGETS:
            rs = runs[scenario].get(target, [])
            if not rs:
                continue
            ok = [r for r in rs if r["ok"]]
            peak = median([proxy_stat(r, "peak_rss_kb") for r in ok])
            load = median([(r["load_start"] + r["load_end"]) / 2 for r in rs])
            cpu = median([proxy_stat(r, "cpu_s_per_100k") for r in ok])
            share = cpu / haproxy_cpu if cpu and haproxy_cpu else None
            print(f"| {scenario} | {target} "
                  f"| {fmt(median([r['publish']['msg_per_s'] for r in ok]))} "
                  f"| {ratio_text(rs, direct, 'publish') if target != 'direct' else ''} "
                  f"| {fmt(median([r['consume']['msg_per_s'] for r in ok]))} "
                  f"| {ratio_text(rs, direct, 'consume') if target != 'direct' else ''} "
                  f"| {fmt(cpu, 2)} | {fmt(share, 2)}{'×' if share else ''} "
                  f"| {fmt(median([proxy_stat(r, 'cpu_s_per_gib') for r in ok]), 2)} "
                  f"| {fmt(peak / 1024 if peak else None, 1)} "
                  f"| {fmt(median([broker_stat(r, 'cpu_s_per_100k') for r in ok]), 2)} "
                  f"| {fmt(load, 1)} | {len(ok)}/{len(rs)} |")


def latency_table(order, runs):
    if "latency" not in runs:
        return
    sample = next(iter(runs["latency"].values()))[0]
    print()
    print(f"Latency, {sample['size']} B at {sample['rate']:.0f} msg/s, publish to delivery"
          f" (concurrent mode, {sample['messages']} messages per run), medians of the runs:")
    print()
    print("| target | p50 µs | p99 µs | p99.9 µs | max µs | added p50 µs | added p99 µs |"
          " proxy CPU-s /100k | of it, user space |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    base = runs["latency"].get("direct", [])
    base_p50 = median([r["latency_us"]["p50"] for r in base if r["ok"]])
    base_p99 = median([r["latency_us"]["p99"] for r in base if r["ok"]])
    for target in TARGETS:
        ok = [r for r in runs["latency"].get(target, []) if r["ok"]]
        if not ok:
            continue
        p50 = median([r["latency_us"]["p50"] for r in ok])
        p99 = median([r["latency_us"]["p99"] for r in ok])
        added50 = p50 - base_p50 if base_p50 is not None and target != "direct" else None
        added99 = p99 - base_p99 if base_p99 is not None and target != "direct" else None
        print(f"| {target} | {fmt(p50)} | {fmt(p99)} "
              f"| {fmt(median([r['latency_us']['p999'] for r in ok]))} "
              f"| {fmt(median([r['latency_us']['max'] for r in ok]))} "
              f"| {fmt(added50)} | {fmt(added99)} "
              f"| {fmt(median([proxy_stat(r, 'cpu_s_per_100k') for r in ok]), 2)} "
              f"| {fmt(median([user_per_100k(r) for r in ok]), 2)} |")


def paired_cpu_per_100k(run):
    """Each proxy's CPU-s per 100k of its own target's messages in a paired run: compare.sh
    passes the proxies' --pid in --targets order (the broker's, beam.smp, aside)."""
    by_target = run["latency_by_target"]
    proxies = [t for t in by_target if t != "direct"]
    pids = [p for p in run.get("pids") or [] if p["name"] != "beam.smp"]
    if len(pids) != len(proxies):
        return {}
    return {t: p["cpu_s"] / by_target[t]["count"] * 1e5
            for t, p in zip(proxies, pids) if p["ok"] and by_target[t]["count"]}


def paired_latency_table(runs):
    """latency-paired: per target, medians over the rounds, each added figure against direct
    in the same run."""
    every = runs.get("latency-paired", {}).get("all", [])
    ok = [r for r in every if r["ok"] and "direct" in r.get("latency_by_target", {})]
    if not ok:
        return
    sample = ok[0]
    print()
    print(f"Paired latency, {sample['size']} B at {sample['rate']:.0f} msg/s in all, publish to"
          f" delivery: every target in each run, message by message in turn"
          f" ({sample['messages']} messages per run, shared out), medians over the rounds"
          f" ({len(ok)}/{len(every)} ok); added = against direct in the same run:")
    print()
    print("| target | messages | p50 µs | p99 µs | added p50 µs | added p99 µs |"
          " added p50 below haproxy's | proxy CPU-s /100k own msgs |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for target in TARGETS:
        # Per round: this target's summary, and direct's and haproxy's from the same run.
        rounds = [(r["latency_by_target"][target], r["latency_by_target"]["direct"],
                   r["latency_by_target"].get("haproxy"), paired_cpu_per_100k(r).get(target))
                  for r in ok if target in r["latency_by_target"]]
        if not rounds:
            continue
        added = target != "direct"
        versus = [mine["p50"] < haproxy["p50"] for mine, _, haproxy, _ in rounds if haproxy]
        below = (f"{sum(versus)} of {len(versus)}"
                 if added and target != "haproxy" and versus else "")
        def added_text(key):
            return fmt(median([m[key] - d[key] for m, d, _, _ in rounds])) if added else ""
        print(f"| {target} | {fmt(median([m['count'] for m, _, _, _ in rounds]))} "
              f"| {fmt(median([m['p50'] for m, _, _, _ in rounds]))} "
              f"| {fmt(median([m['p99'] for m, _, _, _ in rounds]))} "
              f"| {added_text('p50')} | {added_text('p99')} | {below} "
              f"| {fmt(median([cpu for _, _, _, cpu in rounds]), 2)} |")


def curve_table(order, runs):
    """The connection curve (scenarios conn-N): per proxy, CPU per message and memory per
    connection against the number of connections, beside haproxy's."""
    curve = [s for s in order if s.startswith("conn-")]
    if not curve:
        return
    proxies = [t for t in TARGETS if t != "direct" and any(runs[s].get(t) for s in curve)]
    print()
    print("Connection curve, 1 KiB: N publishing and N consuming client connections open"
          " together (2N through a proxy, each with its upstream connection). CPU-s per 100k"
          " messages, and RSS per client connection: (peak RSS - RSS before the connections"
          " opened) / 2N, in KiB; medians of the runs:")
    print()
    head = " | ".join(f"{t} CPU-s /100k | {t} KiB /conn" for t in proxies)
    ratio = "haproxy" in proxies and "nackguard" in proxies
    print(f"| N | {head} |" + (" nackguard CPU × haproxy |" if ratio else ""))
    print("|---:|" + "---:|" * (2 * len(proxies) + (1 if ratio else 0)))
    for scenario in curve:
        cells = []
        cpu = {}
        n = None
        for target in proxies:
            ok = [r for r in runs[scenario].get(target, []) if r["ok"]]
            n = n or (ok[0]["connections"] if ok else None)
            cpu[target] = median([proxy_stat(r, "cpu_s_per_100k") for r in ok])
            per_conn = median([
                # Not below 0: RSS can fall (freed memory returned) before the peak is read.
                max(0, proxy_stat(r, "peak_rss_kb") - proxy_stat(r, "rss_before_connect_kb"))
                / (2 * r["connections"])
                for r in ok
                if proxy_stat(r, "peak_rss_kb") is not None
                and proxy_stat(r, "rss_before_connect_kb") is not None
            ])
            cells.append(f"{fmt(cpu[target], 2)} | {fmt(per_conn, 1)}")
        line = f"| {n if n is not None else scenario} | " + " | ".join(cells) + " |"
        if ratio:
            share = (cpu["nackguard"] / cpu["haproxy"]
                     if cpu["nackguard"] and cpu["haproxy"] else None)
            line += f" {fmt(share, 2)}× |" if share else " – |"
        print(line)


def memory_lines(order, runs, idle_rss_kb, soak_path):
    print()
    if idle_rss_kb:
        print(f"nackguard idle RSS after start: {idle_rss_kb / 1024:.1f} MiB")
    ends = [(s, proxy_stat(r, "rss_end_kb"))
            for s in order for r in runs[s].get("nackguard", []) if r["ok"]]
    if ends:
        trail = ", ".join(f"{kb / 1024:.1f}" for _, kb in ends if kb)
        print(f"nackguard RSS after each run, in order (MiB): {trail}")
    if soak_path:
        samples = []
        with open(soak_path, encoding="utf-8") as f:
            for line in f:
                when, _, kb = line.strip().partition("\t")
                if kb.isdigit():
                    samples.append((when, int(kb)))
        if samples:
            kbs = [kb for _, kb in samples]
            print(f"soak RSS (MiB): start {kbs[0] / 1024:.1f}, min {min(kbs) / 1024:.1f}, "
                  f"max {max(kbs) / 1024:.1f}, end {kbs[-1] / 1024:.1f} "
                  f"({len(samples)} samples, every 10 s)")
            print("soak RSS samples (s: MiB): " +
                  ", ".join(f"{w}: {kb / 1024:.1f}" for w, kb in samples))


def perf_table(path):
    """Per message, medians over the runs of compare.sh --perf (both directions counted)."""
    rows = {}
    order = []
    for r in json_lines(path):
        key = tuple(r["label"].split(":", 1))
        if key not in rows:
            rows[key] = []
            order.append(key)
        rows[key].append(r)
    if not rows:
        return
    print()
    print("Per message, in the proxy (perf stat, medians of the runs):")
    print()
    print("| scenario | target | system calls | context switches | page faults | malloc calls"
          " | runs |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for scenario, target in order:
        rs = rows[(scenario, target)]
        def per(key):
            values = [r[key] / r["messages"] for r in rs if r.get(key) is not None]
            return median(values) if values else None
        print(f"| {scenario} | {target} | {fmt(per('syscalls'), 2)} "
              f"| {fmt(per('context_switches'), 3)} | {fmt(per('page_faults'), 3)} "
              f"| {fmt(per('mallocs'), 2)} | {len(rs)} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("results")
    parser.add_argument("--idle-rss-kb", type=int, default=0)
    parser.add_argument("--soak")
    parser.add_argument("--perf", help="perf.jsonl of compare.sh --perf")
    args = parser.parse_args()
    order, runs = load(args.results)
    if not order:
        print("no runs in " + args.results, file=sys.stderr)
        return 1
    throughput_table(order, runs)
    latency_table(order, runs)
    paired_latency_table(runs)
    curve_table(order, runs)
    memory_lines(order, runs, args.idle_rss_kb, args.soak)
    if args.perf:
        perf_table(args.perf)
    failed = [r["label"] + ": " + r["error"]
              for s in order for rs in runs[s].values() for r in rs if not r["ok"]]
    if failed:
        print()
        print("failed runs:")
        for line in failed:
            print("  " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
