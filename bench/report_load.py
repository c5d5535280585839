"""The throughput and latency sections of docs/BENCHMARKS.md's generated
block: the ceiling and Redis (with the Redis targets back to back),
sluice's matrix (snapshot and journal mode side by side), how much the
batching client batches, and latency in an open loop (at half load, and
while snapshots are written).

Each function writes one section through `w` (a line at a time) and
writes nothing when the run has no results for it; bench/report.py's
`render` calls them in the order the document shows them. The sections
are kept short (a row per cell group, rounds as medians): every cell is
in docs/bench/results.json.
"""

import statistics

from report_pick import (REDIS_OF, denied_pct, journal_ratios, kfmt, lat, ok, paired_rounds, pick, picks, ratio,
                         thr, us)


def ceiling_redis_section(data, w):
    """The echo ceiling's and the Redis targets' cells, then the Redis
    targets measured back to back (`paired`)."""
    res = data["results"]
    a = data["args"]
    c = a["concurrency"]
    others = sorted({t["c"] for r in res for t in [r.get("tags", {})]
                     if (t.get("kind") == "echo" or str(t.get("kind", "")).startswith("redis")) and t["c"] != c})
    rows = [("echo (ceiling), plain", dict(kind="echo", client="plain")),
            ("echo (ceiling), batching", dict(kind="echo", client="batching"))]
    rows += [(f"{kind} ({policy})", dict(kind=kind)) for kind, policy in
             [("redis-zset", "sliding_log"), ("redis-incr", "fixed_window"), ("redis-bucket", "token_bucket")]]
    rows = [(name, tags) for name, tags in rows if picks(res, **tags)]
    if not rows:
        return
    w("### The ceiling and Redis")
    w("")
    head = f"| target | C={c} uniform: decisions/s | p50 | p99 | C={c} zipf: decisions/s | zipf denied |"
    for c2 in others:
        head += f" C={c2} uniform |"
    w(head)
    w("|---" * (6 + len(others)) + "|")
    for name, tags in rows:
        u = pick(res, dist="uniform", c=c, **tags)
        z = pick(res, dist="zipf", c=c, **tags)
        p50, p99, _ = lat(u)
        line = f"| {name} | {thr(u)} | {p50} | {p99} | {thr(z)} | {denied_pct(z)} |"
        for c2 in others:
            r = pick(res, dist="uniform", c=c2, **tags)
            m = f" (M={r['tags']['m']})" if r and r["tags"].get("m") else ""
            line += f" {thr(r)}{m} |"
        w(line)
    w("")
    comparisons = [(algo, c2) for algo in REDIS_OF for c2 in a["concurrencies"] if paired_rounds(data, algo, c2)]
    if comparisons:
        kept = "; ".join(
            f"{algo} at C={c2} {statistics.median(ratio(s, e) for _, e, s, _ in paired_rounds(data, algo, c2)) * 100:.0f} %"
            for algo, c2 in comparisons)
        w("The targets table compares sluice with Redis **back to back**, since this VM can differ by 20 % between "
          "two runs ten minutes apart: in each round the batching echo, sluice through the batching client (one "
          "worker, snapshot mode) and Redis run one right after the other, in an order that rotates by round, "
          f"uniform keys; the medians of the rounds count. sluice kept this much of the echo's throughput there: {kept}.")
        w("")


def durability_sections(data, w):
    """sluice's matrix, summed up: the range of each durability and client
    over the algorithms and worker counts (the chart shows every cell),
    journal ÷ snapshot, and how much Zipf keys are denied."""
    res = data["results"]
    a = data["args"]
    c = a["concurrency"]
    durabilities = [d for d in a["durabilities"] if picks(res, kind="sluice", durability=d, c=c)]
    if not durabilities:
        return
    w(f"### sluice (C={c})")
    w("")

    def span(rows):
        got = [r["throughput"] for r in rows if ok(r)]
        return f"{kfmt(min(got))}–{kfmt(max(got))}" if got else "–"

    parts = []
    for d in durabilities:
        per_client = []
        for client in ["plain", "batching"]:
            cells = {dist: picks(res, kind="sluice", durability=d, client=client, dist=dist, c=c) for dist in a["dists"]}
            if any(cells.values()):
                per_client.append(f"{client} " + " / ".join(span(cells[dist]) for dist in a["dists"]))
        parts.append(f"{d} mode {', '.join(per_client)}")
    text = (f"Decisions per second over the {len(a['algorithms'])} algorithms and {' or '.join(map(str, a['workers']))} "
            f"workers, {' / '.join(a['dists'])} keys: " + "; ".join(parts) + ". The chart below has each algorithm "
            "(uniform keys); docs/bench/results.json has every cell with its latency.")
    rs = journal_ratios(data)
    if rs:
        qs = [q for q, _ in rs]
        text += (" Journal mode answers an ask once JetStream acknowledged the append holding its record (group "
                 "commit, docs/ARCHITECTURE.md, \"The journal\"): journal ÷ snapshot median "
                 f"{statistics.median(qs) * 100:.0f} %, {min(qs) * 100:.0f}–{max(qs) * 100:.0f} % over the "
                 f"{len(qs)} cells.")
    zipf = [r for r in picks(res, kind="sluice", dist="zipf", c=c) if ok(r) and r["allowed"] + r["denied"]]
    if zipf:
        shares = [100 * r["denied"] / (r["allowed"] + r["denied"]) for r in zipf]
        text += f" Zipf keys are denied {min(shares):.0f}–{max(shares):.0f} % (the hot ones)."
    w(text)
    w("")


def grid_section(data, w):
    """How much the batching client batches (the batching grid)."""
    res = data["results"]
    grid = picks(res, kind="grid")
    batching = [r for r in grid if r["tags"]["client"] == "batching"]
    if batching:
        w("### How much the batching client batches")
        w("")
        w("The batching client groups asks per worker and connection, at most two batches of one connection in "
          "flight per worker (docs/CLIENT.md, \"Batching\"), so a batch grows with the asks in flight per "
          "connection. One worker, snapshot mode, uniform keys; the plain subject and Redis at the same C and M:")
        w("")
        w("| algorithm | C | M | decisions/s | p50 | p99 | asks per round trip | vs plain | vs Redis |")
        w("|---|---|---|---|---|---|---|---|---|")
        for r in batching:
            t = r["tags"]
            s_ = r.get("client_stats") or {}
            per_rt = f"{s_['asks'] / s_['round_trips']:.1f}" if s_.get("round_trips") else "–"
            plain = pick(grid, algorithm=t["algorithm"], client="plain", c=t["c"], m=t["m"])
            redis = REDIS_OF[t["algorithm"]]
            rd = pick(res, kind=redis, dist="uniform", c=t["c"], m=t["m"]) if t["m"] == 1 else \
                pick(res, kind=redis, dist="uniform", c=t["c"])
            rd = rd if (rd and (rd["tags"].get("m", data["args"]["connections"]) == t["m"])) else None
            q, qp = ratio(r, rd), ratio(r, plain)
            p50, p99, _ = lat(r)
            w(f"| {t['algorithm']} | {t['c']} | {t['m']} | {thr(r)} | {p50} | {p99} | {per_rt} | "
              f"{f'{qp:.2f}×' if qp else '–'} | {f'{q:.2f}× {redis}' if q else '–'} |")
        w("")


def latency_section(data, w):
    """Latency in an open loop: at half of the best throughput (against the
    ceiling at the same rate), and while snapshots are written."""
    res = data["results"]
    rate_rows = [r for r in res if r.get("tags", {}).get("kind") in ("sluice-rate", "echo-rate")]
    stall = picks(res, kind="stall")
    if not (rate_rows or stall):
        return
    w("### Latency in an open loop")
    w("")
    text = ("`--rate R`: requests start on a fixed schedule whatever the answers do (at most 512 in flight), and "
            "latency counts from when each was due, so a stall is charged to every request it delays.")
    if rate_rows:
        text += (" Half load: R is half of sluice's best snapshot-mode throughput above for that client, the "
                 "ceiling at the same R.")
    if stall:
        text += (" Snapshots: one worker holding many keys (the policy of the 1M section) under a light load, "
                 "snapshots every 2 s (the default) against every hour.")
    w(text)
    w("")
    w("| cell | rate | achieved /s | p50 | p90 | p99 | p99.9 | max |")
    w("|---|---|---|---|---|---|---|---|")
    cells = []
    for r in rate_rows:
        t = r["tags"]
        name = (f"half load, echo (ceiling), {t['client']}" if t["kind"] == "echo-rate" else
                f"half load, sluice {t['client']}, {t.get('algorithm')}, {t.get('workers')} worker(s)")
        cells.append((name, f"{kfmt(t['rate'])}/s", thr(r), r))
    for r in stall:
        t = r["tags"]
        cells.append((f"snapshots every {t['interval']}, {t['keys']:,} keys", f"{t['rate']}/s", "", r))
    for name, rate, achieved, r in cells:
        l = r.get("latency_us", {})
        w(f"| {name} | {rate} | {achieved} | {us(l.get('p50'))} | {us(l.get('p90'))} | {us(l.get('p99'))} | "
          f"{us(l.get('p999'))} | {us(l.get('max'))} |")
    w("")
