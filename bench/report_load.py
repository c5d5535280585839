"""The throughput and latency sections of docs/BENCHMARKS.md's generated
block: the ceiling and Redis, sluice's matrix per durability, the batching
client at higher concurrency, the Redis targets back to back, the batching
grid, what journal mode costs and latency at half load.

Each function writes one section through `w` (a line at a time) and
writes nothing when the run has no results for it; bench/report.py's
`render` calls them in the order the document shows them.
"""

import statistics

from report_pick import REDIS_OF, denied_pct, journal_ratios, kfmt, lat, paired_rounds, pick, picks, ratio, thr, us


def ceiling_redis_section(data, w):
    """The echo ceiling's and the Redis targets' cells."""
    res = data["results"]
    w("### Ceiling and Redis")
    w("")
    w("| target | client | keys | C | decisions/s | p50 | p99 | p99.9 | denied |")
    w("|---|---|---|---|---|---|---|---|---|")
    for r in res:
        t = r.get("tags", {})
        if t.get("kind") == "echo" or str(t.get("kind", "")).startswith("redis"):
            name = "echo (ceiling)" if t["kind"] == "echo" else f"{t['kind']} ({t.get('policy')})"
            p50, p99, p999 = lat(r)
            cm = f"{t['c']}" + (f" (M={t['m']})" if t.get("m") else "")
            w(f"| {name} | {t.get('client', '–')} | {t['dist']} | {cm} | {thr(r)} | {p50} | {p99} | {p999} | "
              f"{denied_pct(r)} |")
    w("")


def durability_sections(data, w):
    """sluice's matrix, one table per durability."""
    res = data["results"]
    a = data["args"]
    c = a["concurrency"]
    for durability in a["durabilities"]:
        if not picks(res, kind="sluice", durability=durability):
            continue
        w(f"### sluice, `durability = \"{durability}\"` (C={c})")
        w("")
        dists = a["dists"]
        head = "| algorithm | client | workers |"
        sep = "|---|---|---|"
        for d in dists:
            head += f" {d}: decisions/s | p50 | p99 | p99.9 |"
            sep += "---|---|---|---|"
        if "zipf" in dists:
            head += " zipf denied |"
            sep += "---|"
        w(head)
        w(sep)
        for algo in a["algorithms"]:
            for client in ["plain", "batching"]:
                for workers in a["workers"]:
                    row = f"| {algo} | {client} | {workers} |"
                    any_cell = False
                    for d in dists:
                        r = pick(res, kind="sluice", durability=durability, workers=workers, algorithm=algo,
                                 client=client, dist=d, c=c)
                        any_cell |= r is not None
                        p50, p99, p999 = lat(r)
                        row += f" {thr(r)} | {p50} | {p99} | {p999} |"
                    if "zipf" in dists:
                        row += f" {denied_pct(pick(res, kind='sluice', durability=durability, workers=workers, algorithm=algo, client=client, dist='zipf', c=c))} |"
                    if any_cell:
                        w(row)
        w("")


def higher_concurrency_section(data, w):
    """The batching client's cells at a concurrency above the matrix's."""
    res = data["results"]
    c = data["args"]["concurrency"]
    extra = [r for r in res if r.get("tags", {}).get("kind") == "sluice" and r["tags"]["c"] != c]
    if extra:
        w("### The batching client at higher concurrency")
        w("")
        w("| algorithm | workers | C | decisions/s | p50 | p99 | p99.9 | vs Redis at the same C |")
        w("|---|---|---|---|---|---|---|---|")
        for r in extra:
            t = r["tags"]
            redis = REDIS_OF.get(t["algorithm"])
            rd = pick(res, kind=redis, dist="uniform", c=t["c"]) if redis else None
            q = ratio(r, rd)
            p50, p99, p999 = lat(r)
            w(f"| {t['algorithm']} | {t['workers']} | {t['c']} | {thr(r)} | {p50} | {p99} | {p999} | "
              f"{f'{q:.2f}× {redis}' if q else '–'} |")
        w("")


def back_to_back_section(data, w):
    """The Redis targets measured back to back (`paired`)."""
    a = data["args"]
    comparisons = [(algo, c2) for algo in REDIS_OF for c2 in a["concurrencies"]
                   if paired_rounds(data, algo, c2)]
    if comparisons:
        w("### The Redis targets back to back")
        w("")
        w("The same VM can differ by 20 % between two runs ten minutes apart, and the matrix above measures Redis "
          "minutes before sluice. So each Redis target is measured again in rounds: the batching echo (the ceiling), "
          "sluice through the batching client (one worker, snapshot mode) and Redis, one right after the other, "
          "all three already running, in an order that rotates by round. The targets table uses the median of the "
          "rounds. Uniform keys.")
        w("")
        w("| algorithm | C | round | echo /s | sluice /s | Redis /s | sluice ÷ Redis | echo ÷ Redis | sluice ÷ echo |")
        w("|---|---|---|---|---|---|---|---|---|")
        for algo, c2 in comparisons:
            for rnd, e, s_, rd in paired_rounds(data, algo, c2):
                w(f"| {algo} | {c2} | {rnd} | {thr(e)} | {thr(s_)} | {thr(rd)} ({rd['tags']['member']}) | "
                  f"{ratio(s_, rd):.2f}× | {ratio(e, rd):.2f}× | {ratio(s_, e) * 100:.0f} % |")
        w("")


def grid_section(data, w):
    """How much the batching client batches (the batching grid)."""
    res = data["results"]
    grid = picks(res, kind="grid")
    if grid:
        w("### How much the batching client batches")
        w("")
        w("The batching client groups asks *per worker* and per client (connection), with at most two batches of one "
          "client in flight per worker (docs/CLIENT.md, \"Batching\"), so a batch grows with the asks in flight per "
          "connection: with one worker, two batches of about C/(2M) asks each. "
          "One worker, snapshot mode, uniform keys; Redis at the same C and M where measured:")
        w("")
        w("| algorithm | C | M | client | decisions/s | p50 | p99 | asks per round trip | vs Redis (same C, M) |")
        w("|---|---|---|---|---|---|---|---|---|")
        for r in grid:
            t = r["tags"]
            s_ = r.get("client_stats") or {}
            per_rt = f"{s_['asks'] / s_['round_trips']:.2f}" if s_.get("round_trips") else ("1" if t["client"] == "plain" else "–")
            redis = REDIS_OF[t["algorithm"]]
            rd = pick(res, kind=redis, dist="uniform", c=t["c"], m=t["m"]) if t["m"] == 1 else \
                pick(res, kind=redis, dist="uniform", c=t["c"])
            rd = rd if (rd and (rd["tags"].get("m", data["args"]["connections"]) == t["m"])) else None
            q = ratio(r, rd)
            p50, p99, _ = lat(r)
            w(f"| {t['algorithm']} | {t['c']} | {t['m']} | {t['client']} | {thr(r)} | {p50} | {p99} | {per_rt} | "
              f"{f'{q:.2f}× {redis}' if q else '–'} |")
        w("")


def journal_section(data, w):
    """What journal mode costs: journal vs snapshot, cell by cell."""
    res = data["results"]
    rs = journal_ratios(data)
    if rs:
        w("### What journal mode costs")
        w("")
        w("Journal mode answers a request only after JetStream acknowledged the append holding its record; a "
          "worker has at most two appends in flight, and the records decided meanwhile on any of its partitions "
          "share the next one "
          "(group commit, docs/ARCHITECTURE.md, \"The journal\"). Same cells as above, journal vs snapshot:")
        w("")
        w("| algorithm | client | workers | keys | snapshot /s | journal /s | journal ÷ snapshot | p99 snapshot | p99 journal |")
        w("|---|---|---|---|---|---|---|---|---|")
        for r in picks(res, kind="sluice", durability="journal"):
            t = r["tags"]
            s = pick(res, kind="sluice", durability="snapshot", workers=t["workers"], algorithm=t["algorithm"],
                     client=t["client"], dist=t["dist"], c=t["c"])
            q = ratio(r, s)
            w(f"| {t['algorithm']} | {t['client']} | {t['workers']} | {t['dist']} | {thr(s)} | {thr(r)} | "
              f"{f'{q * 100:.0f} %' if q else '–'} | {lat(s)[1]} | {lat(r)[1]} |")
        w("")
        w(f"Median journal ÷ snapshot: {statistics.median(q for q, _ in rs) * 100:.0f} %.")
        w("")


def half_load_section(data, w):
    """Latency at half of the best throughput, open loop."""
    res = data["results"]
    rate_rows = [r for r in res if r.get("tags", {}).get("kind") in ("sluice-rate", "echo-rate")]
    if rate_rows:
        w("### Latency at half of the best throughput (open loop)")
        w("")
        w("`--rate R`: requests start on a fixed schedule whatever the answers do (at most 512 in flight); latency "
          "counts from when each request was due, so a stall is charged to every request it delays. R is half of "
          "sluice's best snapshot-mode throughput above, for that client; the ceiling gets the same R.")
        w("")
        w("| target | client | rate | achieved /s | p50 | p90 | p99 | p99.9 | max |")
        w("|---|---|---|---|---|---|---|---|---|")
        for r in rate_rows:
            t = r["tags"]
            name = "echo (ceiling)" if t["kind"] == "echo-rate" else f"sluice, {t.get('algorithm')}, {t.get('workers')} worker(s)"
            l = r.get("latency_us", {})
            w(f"| {name} | {t['client']} | {kfmt(t['rate'])}/s | {thr(r)} | {us(l.get('p50'))} | {us(l.get('p90'))} | "
              f"{us(l.get('p99'))} | {us(l.get('p999'))} | {us(l.get('max'))} |")
        w("")
