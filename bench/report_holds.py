"""The holds' part of docs/BENCHMARKS.md's generated block (docs/HOLDS.md):
reserve + settle pairs per second against allows, measured on the same
worker in alternating rounds, with the target (a pair costs about two
asks: at least 0.45x the allows), and the memory per live hold.

`holds_section` writes the section, `holds_targets` its rows of the
targets table (bench/report_targets.py).
"""

import statistics

from report_pick import NOISY, kfmt, ok, picks, ratio, us

# A pair is two round trips to the owner where an allow is one.
PAIR_TARGET = 0.45


def holds_rounds(data, client):
    """(round, allow, pair) results of one client, complete rounds only."""
    rows = picks(data.get("holds_results") or data["results"], kind="holds", client=client)
    out = []
    for rnd in sorted({r["tags"]["round"] for r in rows}):
        got = {r["tags"]["verb"]: r for r in rows if r["tags"]["round"] == rnd}
        if ok(got.get("allow")) and ok(got.get("hold")):
            out.append((rnd, got["allow"], got["hold"]))
    return out


def holds_targets(data, add):
    for client in ("plain", "batching"):
        rounds = holds_rounds(data, client)
        if rounds:
            r = statistics.median(ratio(p, a) for _, a, p in rounds)
            each = ", ".join(f"{ratio(p, a):.2f}×" for _, a, p in rounds)
            add(f"reserve+settle pairs ≥ {PAIR_TARGET}× allows ({client})", f"median {r:.2f}× ({each})",
                f"≥ {PAIR_TARGET}×", r >= PAIR_TARGET, "back to back on one worker")


def holds_section(data, w):
    h = data.get("holds")
    if not h:
        return
    w("### Holds: reserve + settle pairs against allows")
    w("")
    w("One worker, snapshot mode, a sliding window of 100 per second per key (nothing is denied), 10,000 uniform "
      "keys, C=64, M=2; `sluice bench --verb allow` against `--verb hold`, where one request is a reserve and, "
      "when allowed, the settle of its hold with the same cost (two round trips to the key's owner). Each round "
      "measures both, in alternating order; the batching client sends reserves and settles in its batches "
      "(a pair is two batch items, one after the other), as it sends allows."
      + (f" Measured {h['measured']}, with `bench/run.sh --parts holds`, merged into these results."
         if h.get("measured") else ""))
    w("")
    w("| client | rounds | allows/s (median) | pairs/s (median) | pairs ÷ allows, each round | pair p50 / p99 (median) |")
    w("|---|---|---|---|---|---|")
    for client in ("plain", "batching"):
        rounds = holds_rounds(data, client)
        if not rounds:
            continue
        busy = sum(1 for _, a, p in rounds
                   if any(r.get("machine", {}).get("foreign_cores", 0) > NOISY for r in (a, p)))
        noisy = f" ({busy} ⚠)" if busy else ""
        p50 = statistics.median(p["latency_us"]["p50"] for _, _, p in rounds)
        p99 = statistics.median(p["latency_us"]["p99"] for _, _, p in rounds)
        w(f"| {client} | {len(rounds)}{noisy} | {kfmt(statistics.median(a['throughput'] for _, a, _ in rounds))} | "
          f"{kfmt(statistics.median(p['throughput'] for _, _, p in rounds))} | "
          f"{', '.join(f'{ratio(p, a):.2f}' for _, a, p in rounds)} | {us(p50)} / {us(p99)} |")
    m = h.get("memory")
    if m and m.get("bytes_per_hold") is not None:
        w("")
        w(f"Memory per live hold: one worker, {m['keys']:,} keys asked once each (their counters), then one reserve "
          f"on each with a 1 h ttl ({m['client']} client, {kfmt(m.get('reserve_throughput'))} reserves/s, "
          f"{m.get('holds'):,} holds live, {m.get('errors')} errors): worker RSS {m['rss_keys_kib'] / 1024:.0f} MiB → "
          f"{m['rss_holds_kib'] / 1024:.0f} MiB, **{m['bytes_per_hold']} bytes per live hold**: the RSS difference over "
          "the holds, so the owner's table of holds and what the allocator keeps of the snapshots that carry them "
          "every 2 s.")
    w("")
