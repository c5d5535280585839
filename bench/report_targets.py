"""The targets table of docs/BENCHMARKS.md: each target the benchmarks
must meet (plain subject vs the ceiling, batching vs Redis, p99 at half
load, memory and restore with many keys, journal vs snapshot, hot keys,
reserve + settle pairs against allows),
what this run measured for it and whether it was met.

Kept apart from the sections (report_load.py, report_state.py): a target
judges results that several sections show.
"""

import statistics

from report_holds import holds_targets
from report_hot import hot_targets
from report_pick import best, journal_ratios, kfmt, ok, paired_median, paired_rounds, pick, ratio, us


def targets(data):
    res = data["results"]
    c = data["args"]["concurrency"]
    rows = []

    def add(name, measured, threshold, met, note=""):
        rows.append((name, measured, threshold, "**yes**" if met else ("no" if met is not None else "–"), note))

    # 1. plain subject vs the ceiling
    for dist in data["args"]["dists"]:
        ceiling = pick(res, kind="echo", client="plain", dist=dist, c=c)
        b = best(res, kind="sluice", client="plain", durability="snapshot", dist=dist, c=c)
        r = ratio(b, ceiling)
        note = f"best cell: {b['tags']['algorithm']}, {b['tags']['workers']} worker(s)" if ok(b) else ""
        add(f"plain subject ≥ 70 % of the ceiling (C={c}, {dist})",
            f"{kfmt(b['throughput']) if ok(b) else '–'} / {kfmt(ceiling['throughput']) if ok(ceiling) else '–'} = "
            f"{r * 100:.0f} %" if r else "–", "≥ 70 %", (r >= 0.70) if r else None, note)
    # 2. batching vs Redis
    if data.get("batching"):
        for c2 in data["args"]["concurrencies"]:
            for algo, redis, need in [("sliding_log", "redis-zset", 2.0), ("fixed_window", "redis-incr", 1.2)]:
                b = best(res, kind="sluice", client="batching", durability="snapshot", algorithm=algo,
                         dist="uniform", c=c2)
                rd = pick(res, kind=redis, dist="uniform", c=c2)
                r = ratio(b, rd)
                matrix = (f"{kfmt(b['throughput']) if ok(b) else '–'} / {kfmt(rd['throughput']) if ok(rd) else '–'}"
                          f" = {r:.2f}×" if r else "–")
                note = f"{b['tags']['workers']} worker(s)" if ok(b) else ""
                rounds = paired_rounds(data, algo, c2)
                if rounds:
                    # Back to back is what decides: the matrix cells are minutes apart.
                    r, echo_r = paired_median(rounds)
                    each = ", ".join(f"{ratio(s, rr):.2f}×" for _, _, s, rr in rounds)
                    matrix = f"back to back: median {r:.2f}× ({each}); matrix cells: {matrix}"
                    note = f"1 worker; the echo ceiling in the same rounds: {echo_r:.2f}× Redis"
                add(f"batching {algo} ≥ {need}× Redis {redis[6:]} (C={c2})", matrix, f"≥ {need}×",
                    (r >= need) if r else None, note)
    else:
        add("batching client ≥ 2× Redis sorted set, ≥ 1.2× Redis INCR", "not measured", "", None,
            "the batching client was not available to this build")
    # 3. p99 at half load
    for client in ["plain", "batching"]:
        s = pick(res, kind="sluice-rate", client=client)
        e = pick(res, kind="echo-rate", client=client)
        if ok(s) and ok(e):
            r = s["latency_us"]["p99"] / max(1, e["latency_us"]["p99"])
            add(f"p99 at half of max throughput ≤ 1.5× the ceiling's p99 ({client})",
                f"{us(s['latency_us']['p99'])} vs {us(e['latency_us']['p99'])} = {r:.2f}× "
                f"at {kfmt(s['tags']['rate'])}/s", "≤ 1.5×", r <= 1.5)
    # 4. 1M keys
    m = data.get("million")
    if m and m.get("rss_kib"):
        # The target: 160 MB for 1M keys (it was 400 MB before).
        mb = m["rss_kib"] * 1024 / 1e6
        add(f"{m['keys'] // 1000}k active keys in ≤ {160 * m['keys'] / 1_000_000:g} MB worker RSS "
            "(160 MB per 1M, scaled)" if m["keys"] != 1_000_000 else "1M active keys in ≤ 160 MB worker RSS",
            f"{mb:.0f} MB ({m['rss_kib'] / 1024:.0f} MiB)", f"≤ {160 * m['keys'] / 1_000_000:g} MB",
            mb <= 160 * m["keys"] / 1_000_000)
        if m.get("start_to_answering_s") is not None:
            add("restored after a crash in ≤ 3 s (worker start → all partitions answer)",
                f"{m['start_to_answering_s']:.2f} s", "≤ 3 s", m["start_to_answering_s"] <= 3.0,
                "leases already expired; see the 1M section for kill → answering")
    # 5. journal vs snapshot
    rs = journal_ratios(data)
    if rs:
        worst = min(rs, key=lambda x: x[0])
        add("journal ≥ 50 % of snapshot throughput",
            f"median {statistics.median(r for r, _ in rs) * 100:.0f} %, lowest {worst[0] * 100:.0f} % ({worst[1]})",
            "≥ 50 %", worst[0] >= 0.5, f"{sum(1 for r, _ in rs if r >= 0.5)} of {len(rs)} cells meet it")
    # 6. hot keys with local budgets
    hot_targets(data, add)
    # 7. holds
    holds_targets(data, add)
    return rows
