"""The sections of docs/BENCHMARKS.md's generated block about a worker's
state: what snapshots do to latency, memory and restore with many keys,
a flood of new keys against `max_keys`, a takeover after heavy load, and
usage history.

Each function writes one section through `w` (a line at a time) and
writes nothing when the run has no results for it; bench/report.py's
`render` calls them in the order the document shows them.
"""

from report_pick import kfmt, pick, picks, ratio, thr, us


def stall_section(data, w):
    """What snapshots do to latency."""
    res = data["results"]
    stall = picks(res, kind="stall")
    if stall:
        w("### What snapshots do to latency")
        w("")
        w("One worker holding many keys (policy as in the next section), a light open-loop load of 5000 asks per "
          "second over those keys; snapshots every 2 s (the default) against snapshots effectively off (1 h):")
        w("")
        w("| snapshot_interval | keys | rate | p50 | p90 | p99 | p99.9 | max |")
        w("|---|---|---|---|---|---|---|---|")
        for r in stall:
            t = r["tags"]
            l = r.get("latency_us", {})
            w(f"| {t['interval']} | {t['keys']:,} | {t['rate']}/s | {us(l.get('p50'))} | {us(l.get('p90'))} | "
              f"{us(l.get('p99'))} | {us(l.get('p999'))} | {us(l.get('max'))} |")
        w("")


def million_section(data, w):
    """Memory with many active keys and their restore."""
    m = data.get("million")
    if m:
        w(f"### {m['keys']:,} active keys: memory and restore")
        w("")
        fill = m.get("fill", {})
        w(f"One worker, policy `default` = {m['policy']}, snapshot mode. {m['keys']:,} distinct keys asked once each "
          f"through the {m.get('fill_client', '?')} client (C=256, M=2) at {kfmt(fill.get('throughput'))} decisions/s; "
          "then the worker's RSS is read from `/proc/<pid>/status` once the snapshots hold every key.")
        w("")
        w("| measure | value |")
        w("|---|---|")
        w(f"| worker RSS before the keys | {m.get('rss_empty_kib', 0) / 1024:.0f} MiB |")
        w(f"| worker RSS with the keys (VmRSS) | **{m.get('rss_kib', 0) / 1024:.0f} MiB = "
          f"{m.get('rss_kib', 0) * 1024 / 1e6:.0f} MB** |")
        w(f"| peak RSS (VmHWM) | {m.get('hwm_kib', 0) / 1024:.0f} MiB |")
        w(f"| per key | {m.get('bytes_per_key', '?')} bytes |")
        w(f"| keys in the snapshots | {m.get('snapshot_keys', 0):,} |")
        w(f"| RSS of a worker that restored them | {m.get('rss_after_restore_kib', 0) / 1024:.0f} MiB |")
        cl = m.get("crash_log", {})
        w(f"| kill -9, new worker started at once → every partition answers | {m.get('crash_to_answering_s', '?')} s "
          f"(the dead worker's leases must expire first: `lease_ttl` {m.get('lease_ttl', '3s')}, "
          "then up to 0.5 s of orphan grace) |")
        if cl.get("partitions"):
            w(f"| … of which restoring (new worker's first → last partition answering) | "
              f"{cl.get('first_answering_s', 0):.2f} s → {cl.get('last_answering_s', 0):.2f} s after its start; "
              f"per partition took_ms median {cl.get('took_ms_median')}, max {cl.get('took_ms_max')} |")
        rl = m.get("restore_log", {})
        w(f"| leases expired, new worker started → every partition answers | **{m.get('start_to_answering_s', '?')} s** |")
        if rl.get("partitions"):
            w(f"| … first / last partition answering after the worker's start | {rl.get('first_answering_s', 0):.2f} s / "
              f"{rl.get('last_answering_s', 0):.2f} s ({rl.get('keys', 0):,} keys restored; took_ms median "
              f"{rl.get('took_ms_median')}, max {rl.get('took_ms_max')}) |")
        w("")
        if m.get("measured"):
            w(f"Measured {m['measured']} at `{m.get('commit', '?')}` (`bench/run.sh --parts million`, merged into "
              "these results); the table above is the median run. Each run, and the build before "
              f"(`{m.get('before', {}).get('commit', '?')}`) in the same minutes:")
            w("")
            w("| build | RSS with the keys | peak | per key | RSS after a restore | leases expired → every partition answers |")
            w("|---|---|---|---|---|---|")
            for label, runs in [(f"before (`{m.get('before', {}).get('commit', '?')}`)", m.get("before", {}).get("runs", [])),
                                (f"`{m.get('commit', '?')}`", m.get("runs", []))]:
                for r in runs:
                    w(f"| {label} | {r.get('rss_kib', 0) / 1024:.0f} MiB | {r.get('hwm_kib', 0) / 1024:.0f} MiB | "
                      f"{r.get('bytes_per_key', '?')} B | {r.get('rss_after_restore_kib', 0) / 1024:.0f} MiB | "
                      f"{r.get('start_to_answering_s', '?')} s |")
            w("")


def flood_section(data, w):
    """A flood of new keys against `max_keys`."""
    fl = data.get("flood")
    if fl and fl.get("floods"):
        w(f"### A flood of new keys against `max_keys = {fl['max_keys']:,}`")
        w("")
        w(f"One worker, policy `default` = {fl['policy']}, snapshot mode, `max_keys = {fl['max_keys']:,}`. "
          f"{fl['keys_per_flood']:,} distinct keys (five times the bound), each asked once through the "
          f"{fl.get('client', '?')} client (C=256, M=2); then as many again. At the bound each new key makes "
          "the worker forget the least valuable live key (docs/CONFIG.md, `max_keys`).")
        if fl.get("measured"):
            busy = "" if fl.get("machine_quiet", True) else (
                "; other builds were running on the machine then, so decisions/s are low (RSS is not affected)")
            w("")
            w(f"Measured {fl['measured']} at `{fl.get('commit', '?')}` (`bench/run.sh --parts flood`, merged into "
              f"these results){busy}.")
        w("")
        w("| after | decisions/s | errors | live keys | forgotten | worker RSS | peak RSS |")
        w("|---|---|---|---|---|---|---|")
        w(f"| start | | | 0 | 0 | {fl.get('rss_empty_kib', 0) / 1024:.0f} MiB | |")
        for i, f in enumerate(fl["floods"]):
            w(f"| flood {i + 1} | {kfmt(f.get('throughput'))} | {f.get('errors')} | {f.get('keys') or 0:,} | "
              f"{f.get('evicted') or 0:,} | {f.get('rss_kib', 0) / 1024:.0f} MiB | {f.get('hwm_kib', 0) / 1024:.0f} MiB |")
        w("")


def takeover_section(data, w):
    """A takeover after heavy load."""
    tk = data.get("takeover")
    if tk and tk.get("runs"):
        w("### Takeover after heavy load")
        w("")
        w(f"One worker, policy as above, {tk['keys']:,} keys asked for 5 s through the {tk.get('client', '?')} client "
          "(C=256, M=2), then `kill -9`; once its leases expired a new worker starts. Time from that start until "
          "every partition answers (journal mode replays what was counted since each partition's snapshot):")
        w("")
        w("| durability | load (decisions/s) | start → every partition answers |")
        w("|---|---|---|")
        for durability, runs in tk["runs"].items():
            for r in runs:
                w(f"| {durability} | {kfmt(r.get('load_throughput'))} | **{r.get('start_to_answering_s')} s** |")
        before = tk.get("before")
        if before:
            for durability, runs in before["runs"].items():
                times = ", ".join(f"{r.get('start_to_answering_s')} s" for r in runs)
                w(f"| {durability}, before (`{before.get('commit')}`) | | {times} |")
        if tk.get("measured"):
            w("")
            w(f"Measured {tk['measured']} at `{tk.get('commit', '?')}` (`bench/run.sh --parts takeover`).")
        w("")


def usage_section(data, w):
    """Usage history: on vs off, the writes it causes, its queries."""
    res = data["results"]
    us_ = data.get("usage")
    if us_:
        w("### Usage history")
        w("")
        w("Usage on (the default) against off (`[usage] enabled = false`): one worker, snapshot mode, the "
          "matrix's `default` policy, 10,000 keys, C=64, M=2; each round measures both, in alternating order "
          "(docs/USAGE.md has the design).")
        w("")
        w("| client | round | usage off | usage on | on / off |")
        w("|---|---|---|---|---|")
        rows = data.get("usage_results") or [r for r in res if r.get("tags", {}).get("kind") == "usage"]
        for client in ("plain", "batching"):
            for rnd in range(1, (us_.get("rounds") or 0) + 1):
                off = pick(rows, kind="usage", usage="off", client=client, round=rnd)
                on = pick(rows, kind="usage", usage="on", client=client, round=rnd)
                if off and on:
                    r = ratio(on, off)
                    w(f"| {client} | {rnd} | {thr(off)} | {thr(on)} | {f'{r:.2f}' if r else '–'} |")
        wr = us_.get("writes")
        if wr:
            w("")
            w(f"JetStream writes caused by usage with {wr['keys']:,} keys in use ({wr['client']} client, "
              f"{kfmt(wr.get('throughput'))} decisions/s for {wr['seconds']} s, flush every "
              f"`snapshot_interval` = {wr['snapshot_interval_s']} s): **{wr['writes_per_s']} writes/s** "
              f"({wr['writes']} in all: one record per changed partition and minute per flush, plus rollups). "
              f"A record held {wr.get('keys_per_record')} keys at {wr.get('bytes_per_entry')} bytes per key; a key "
              f"counted in every minute of a day is stored in 1440 + 288 + 24 + 1 records, "
              f"**{wr.get('bytes_per_key_day'):,} bytes per active key per day** (the minute tier, kept one day, is "
              f"most of it).")
        q = us_.get("queries")
        if q:
            s30, top10 = q["series_30d_1h"], q["top10_1h"]
            w("")
            w(f"Queries on synthetic records ({q['keys']:,} keys, {q['keys_per_record']:,} per partition and "
              f"bucket, {q['records']:,} records), one at a time from one client:")
            w("")
            w("| query | n | p50 | p99 | errors |")
            w("|---|---|---|---|---|")
            w(f"| one key, the last 30 days by hour ({s30.get('points')} points) | {s30['n']} | "
              f"{s30['p50_ms']} ms | **{s30['p99_ms']} ms** | {s30['errors']} |")
            w(f"| top 10 over the last hour, every partition | {top10['n']} | {top10['p50_ms']} ms | "
              f"**{top10['p99_ms']} ms** | {top10['errors']} |")
        if us_.get("measured"):
            w("")
            w(f"Measured {us_['measured']} at `{us_.get('commit', '?')}` (`bench/run.sh --parts usage`, merged "
              "into these results).")
        w("")
