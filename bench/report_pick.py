"""The report's vocabulary: picking results by their tags (`pick`,
`picks`, `best`), formatting them (`kfmt`, `us`, `lat`, `thr`,
`denied_pct`) and comparing them (`ratio`, the back-to-back rounds of the
Redis comparisons, journal ÷ snapshot).

Every section of docs/BENCHMARKS.md's generated block (report_*.py) and
the targets speak it, so it lives below them all.
"""

import statistics

NOISY = 0.15  # cores used by other processes during a cell that make it suspect
# The Redis script each batching target is compared with.
REDIS_OF = {"sliding_log": "redis-zset", "fixed_window": "redis-incr"}


def ok(r):
    return r is not None and "error" not in r


def pick(results, **tags):
    for r in results:
        t = r.get("tags", {})
        if all(t.get(k) == v for k, v in tags.items()):
            return r
    return None


def picks(results, **tags):
    return [r for r in results if all(r.get("tags", {}).get(k) == v for k, v in tags.items())]


def kfmt(v):
    if v is None:
        return "–"
    return f"{v / 1000:.1f}k" if v >= 1000 else f"{v:.0f}"


def us(v):
    if v is None:
        return "–"
    return f"{v / 1000:.2f} ms" if v >= 1000 else f"{v} µs"


def lat(r):
    if not ok(r):
        return "–", "–", "–"
    l = r["latency_us"]
    return us(l["p50"]), us(l["p99"]), us(l["p999"])


def thr(r):
    if r is None:
        return "–"
    if "error" in r:
        return "failed"
    mark = " ⚠" if r.get("machine", {}).get("foreign_cores", 0) > NOISY else ""
    return kfmt(r["throughput"]) + mark


def denied_pct(r):
    if not ok(r):
        return "–"
    d = r["allowed"] + r["denied"]
    return f"{100 * r['denied'] / d:.0f} %" if d else "–"


def ratio(a, b):
    if not (ok(a) and ok(b)) or not b["throughput"]:
        return None
    return a["throughput"] / b["throughput"]


def best(results, **tags):
    rows = [r for r in picks(results, **tags) if ok(r)]
    return max(rows, key=lambda r: r["throughput"]) if rows else None


def paired_rounds(data, algo, c):
    """The back-to-back rounds of one Redis comparison: (round, echo,
    sluice, redis) results, complete rounds only."""
    out = []
    rows = picks(data["results"], kind="paired", algorithm=algo, c=c)
    for rnd in sorted({r["tags"]["round"] for r in rows}):
        got = {r["tags"]["member"]: r for r in rows if r["tags"]["round"] == rnd}
        redis = next((r for m, r in got.items() if m.startswith("redis")), None)
        if ok(got.get("echo")) and ok(got.get("sluice")) and ok(redis):
            out.append((rnd, got["echo"], got["sluice"], redis))
    return out


def paired_median(rounds):
    """Median sluice ÷ Redis and echo ÷ Redis over the rounds."""
    return (statistics.median(ratio(s, r) for _, _, s, r in rounds),
            statistics.median(ratio(e, r) for _, e, _, r in rounds))

def journal_ratios(data):
    res = data["results"]
    out = []
    for r in picks(res, kind="sluice", durability="journal"):
        t = r["tags"]
        s = pick(res, kind="sluice", durability="snapshot", workers=t["workers"], algorithm=t["algorithm"],
                 client=t["client"], dist=t["dist"], c=t["c"])
        q = ratio(r, s)
        if q is not None:
            out.append((q, f"{t['algorithm']} {t['client']} {t['workers']}w {t['dist']}"))
    return out
