"""The sections of docs/BENCHMARKS.md's generated block about a worker's
state: memory and restore with many keys, a flood of new keys against
`max_keys` and a takeover after heavy load (one section, `state_section`),
and usage history (`usage_section`).

Each function writes one section through `w` (a line at a time) and
writes nothing when the run has no results for it; bench/report.py's
`render` calls them in the order the document shows them. The build each
part measured, and each run of a part measured several times, are in
docs/bench/results.json.
"""

import statistics

from report_pick import kfmt, pick, ratio


def state_section(data, w):
    """Many keys: memory and restore with many active keys, a flood of new
    keys against `max_keys`, and a takeover after heavy load."""
    m, fl, tk = data.get("million"), data.get("flood"), data.get("takeover")
    fl = fl if fl and fl.get("floods") else None
    tk = tk if tk and tk.get("runs") else None
    if not (m or fl or tk):
        return
    policy = (m or fl or {}).get("policy", "?")
    w(f"### Many keys: {m['keys']:,} active keys, a flood of new keys, takeover after heavy load" if m else
      "### Many keys: a flood of new keys, takeover after heavy load")
    w("")
    text = (f"One worker, policy `default` = {policy}, snapshot mode unless said, keys asked through the batching "
            "client (C=256, M=2).")
    when = []
    if m:
        fill = m.get("fill", {})
        text += (f" {m['keys']:,} keys asked once each ({kfmt(fill.get('throughput'))} decisions/s), the worker's "
                 "RSS read from `/proc/<pid>/status` once the snapshots hold every key.")
        when.append(("million", m))
    if fl:
        text += (f" A flood: {fl['keys_per_flood']:,} new keys against `max_keys = {fl['max_keys']:,}`, twice; at "
                 "the bound each new key makes the worker forget the least valuable live key (docs/CONFIG.md, "
                 "`max_keys`).")
        if not fl.get("machine_quiet", True):
            text += " Other builds ran meanwhile, so its decisions/s are low (RSS is not affected)."
        when.append(("flood", fl))
    if tk:
        text += (f" Takeover: {tk['keys']:,} keys asked for 5 s, `kill -9`, a new worker started once the leases "
                 "expired (journal mode replays what was counted since each partition's snapshot).")
        when.append(("takeover", tk))
    dated = [f"{part['measured']} (`--parts {name}`)" for name, part in when if part.get("measured")]
    if dated:
        text += " Measured " + "; ".join(dated) + ", merged into these results."
    w(text)
    w("")
    w("| measure | value |")
    w("|---|---|")
    if m:
        w(f"| {m['keys']:,} active keys: worker RSS before → with them (VmRSS) | "
          f"{m.get('rss_empty_kib', 0) / 1024:.0f} MiB → **{m.get('rss_kib', 0) / 1024:.0f} MiB = "
          f"{m.get('rss_kib', 0) * 1024 / 1e6:.0f} MB** (peak {m.get('hwm_kib', 0) / 1024:.0f} MiB), "
          f"{m.get('bytes_per_key', '?')} bytes per key |")
        w(f"| a worker that restored the {m.get('snapshot_keys', 0):,} keys of the snapshots: RSS | "
          f"{m.get('rss_after_restore_kib', 0) / 1024:.0f} MiB |")
        w(f"| kill -9, new worker started at once → every partition answers | {m.get('crash_to_answering_s', '?')} s "
          f"(the dead worker's leases expire first: `lease_ttl` {m.get('lease_ttl') or '3s'}, then up to 0.5 s of "
          "orphan grace) |")
        w(f"| leases expired, new worker started → every partition answers | "
          f"**{m.get('start_to_answering_s', '?')} s** |")
    if fl:
        floods = fl["floods"]
        speeds = ", ".join(kfmt(f.get("throughput")) for f in floods)
        live = ", ".join(f"{f.get('keys') or 0:,}" for f in floods)
        rss = ", ".join(f"{f.get('rss_kib', 0) / 1024:.0f}" for f in floods)
        peak = max(f.get("hwm_kib", 0) for f in floods) / 1024
        errors = sum(f.get("errors") or 0 for f in floods)
        w(f"| a flood of new keys against `max_keys = {fl['max_keys']:,}` (RSS before "
          f"{fl.get('rss_empty_kib', 0) / 1024:.0f} MiB), {len(floods)} floods | {speeds} decisions/s, {errors} "
          f"errors; live keys after each {live}; RSS {rss} MiB (peak {peak:.0f} MiB) |")
    if tk:
        for durability, runs in tk["runs"].items():
            loads = [r["load_throughput"] for r in runs if r.get("load_throughput")]
            times = [r["start_to_answering_s"] for r in runs if r.get("start_to_answering_s") is not None]
            if times:
                w(f"| takeover after heavy load, {durability} mode ({len(runs)} runs, "
                  f"{kfmt(min(loads)) if loads else '–'}–{kfmt(max(loads)) if loads else '–'} decisions/s) | "
                  f"**{min(times)}–{max(times)} s** |")
    w("")


def usage_section(data, w):
    """Usage history: on vs off, the writes it causes, its queries."""
    res = data["results"]
    us_ = data.get("usage")
    if not us_:
        return
    w("### Usage history")
    w("")
    text = ("Usage on (the default) against off (`[usage] enabled = false`), both in each round in alternating "
            "order: one worker, snapshot mode, the matrix's `default` policy, 10,000 keys, C=64, M=2 "
            "(docs/USAGE.md has the design).")
    rows = data.get("usage_results") or [r for r in res if r.get("tags", {}).get("kind") == "usage"]
    per_client = []
    for client in ("plain", "batching"):
        pairs = []
        for rnd in range(1, (us_.get("rounds") or 0) + 1):
            off = pick(rows, kind="usage", usage="off", client=client, round=rnd)
            on = pick(rows, kind="usage", usage="on", client=client, round=rnd)
            if off and on and ratio(on, off):
                pairs.append((off, on))
        if pairs:
            per_client.append(
                f"{client} {kfmt(statistics.median(off['throughput'] for off, _ in pairs))} → "
                f"{kfmt(statistics.median(on['throughput'] for _, on in pairs))} decisions/s (on ÷ off "
                f"{', '.join(f'{ratio(on, off):.2f}' for off, on in pairs)})")
    if per_client:
        text += " Off → on, medians: **" + "; ".join(per_client) + "**."
    wr = us_.get("writes")
    if wr:
        text += (f" With {wr['keys']:,} keys in use ({kfmt(wr.get('throughput'))} decisions/s for {wr['seconds']} s, "
                 f"a flush every {wr['snapshot_interval_s']} s) usage wrote **{wr['writes_per_s']} JetStream "
                 f"records a second** (one per changed partition and minute per flush, plus rollups), "
                 f"{wr.get('bytes_per_entry')} bytes per key in a record: a key counted in every minute of a day "
                 f"costs **{wr.get('bytes_per_key_day'):,} bytes a day** (mostly the minute tier, kept one day).")
    q = us_.get("queries")
    if q:
        s30, top10 = q["series_30d_1h"], q["top10_1h"]
        text += (f" Queries on {q['keys']:,} keys' records, one at a time: one key's last 30 days by hour p99 "
                 f"**{s30['p99_ms']} ms**, the top 10 of the last hour over every partition p99 "
                 f"**{top10['p99_ms']} ms** ({s30['errors'] + top10['errors']} errors).")
    if us_.get("measured"):
        text += f" Measured {us_['measured']} (`--parts usage`, merged into these results)."
    w(text)
    w("")
