"""The hot-key part of the report (docs/CLIENT.md, "Local budgets"): its rounds, ratios and
admission counts, its rows of the targets table (`hot_targets`) and its
section of docs/BENCHMARKS.md (`hot_section`).

Kept apart because it reads its own results (`kind = hotkeys`) in its own
way: per round, per member, with over- and under-admission.
"""

import statistics

from report_pick import NOISY, kfmt, ok, picks, ratio


# The hot-key part, in the order of its table.
HOT_MEMBERS = ["echo", "redis-incr", "budgets off", "budgets on", "uniform, budgets off", "uniform, budgets on"]


def hot_rounds(data):
    """{round: {member: result}} of the hot-key part."""
    out = {}
    for r in picks(data["results"], kind="hotkeys"):
        out.setdefault(r["tags"]["round"], {})[r["tags"]["member"]] = r
    return dict(sorted(out.items()))


def hot_ratios(data, member, base):
    """member ÷ base throughput in each round where both ran."""
    rs = [ratio(got.get(member), got.get(base)) for got in hot_rounds(data).values()]
    return [r for r in rs if r is not None]


def hot_admission(data, member):
    """A member's admission counts added up over its rounds, or None."""
    rows = [r["admission"] for r in picks(data["results"], kind="hotkeys", member=member)
            if ok(r) and r.get("admission")]
    if not rows:
        return None
    total = {k: sum(a[k] for a in rows) for k in ("over_admitted", "over_windows", "limited_windows",
                                                  "under_admitted", "under_windows", "unplaced", "allowed")}
    total["max"] = rows[0]["max"]
    return total


def under_text(adm):
    """Under-admission in units and as a share of what the limited windows allowed at most."""
    if not adm:
        return "–"
    room = adm["limited_windows"] * adm["max"]
    share = f" ({100 * adm['under_admitted'] / room:.1f} % of {adm['limited_windows']} limited windows' max)" \
        if room else ""
    return f"{adm['under_admitted']:,}{share}"


def pct(shares):
    """The median of some shares as a percentage, or – without any."""
    return f"{100 * statistics.median(shares):.1f} %" if shares else "–"


def local_share(r, sources=("budget",)):
    """The share of a batching client's decisions made by `sources` (a
    slice of a key's budget, the deny cache: no round trip), or None where
    it cannot tell."""
    cs = (r or {}).get("client_stats") or {}
    by_source = {k[len("answered_by_"):]: v for k, v in cs.items() if k.startswith("answered_by_")}
    if by_source and sum(by_source.values()):
        return sum(by_source.get(s, 0) for s in sources) / sum(by_source.values())
    if cs.get("asks") and all(s in cs for s in sources):
        return sum(cs[s] for s in sources) / cs["asks"]
    return None


def median_x(rs):
    return f"{statistics.median(rs):.2f}× ({', '.join(f'{r:.2f}×' for r in rs)})" if rs else "–"


def hot_targets(data, add):
    """The targets for the hot-key workload (docs/BENCHMARKS.md, "The targets")."""
    hk = data.get("hotkeys")
    if not hk or not hot_rounds(data):
        return
    budgets = hk.get("local_budget")
    off_note = "" if budgets else "this build has no local budgets: the budgets-on cells ran with them off"
    load = (f"C={hk['c']}, M={hk['m']}, {hk['hot_keys']} of {hk['keys'] // 1000}k keys get "
            f"{hk['hot_share'] * 100:.0f} %")
    for base, need, name in [("redis-incr", 2.0, "Redis INCR"), ("echo", 1.5, "the batching echo ceiling")]:
        rs = hot_ratios(data, "budgets on", base)
        met = (statistics.median(rs) >= need) if rs and budgets else None
        add(f"hot keys, batching with budgets ≥ {need}× {name} ({load})", f"back to back: median {median_x(rs)}",
            f"≥ {need}×", met, off_note or f"budgets off: {median_x(hot_ratios(data, 'budgets off', base))}")
    adm = hot_admission(data, "budgets on")
    if adm:
        add("hot keys with budgets: 0 over-admission",
            f"{adm['over_admitted']:,} units over in {adm['over_windows']} (key, window) pairs; "
            f"under-admission {under_text(adm)}", "0", (adm["over_admitted"] == 0) if budgets else None,
            off_note or f"all rounds; {adm['unplaced']} decisions could not be placed in a window")
    rs = hot_ratios(data, "uniform, budgets on", "uniform, budgets off")
    met = (statistics.median(rs) >= 0.9) if rs and budgets else None
    add("uniform keys: budgets on within noise of budgets off", f"on ÷ off: median {median_x(rs)}", "≥ 0.9×",
        met, off_note)


def hot_section(data, w):
    hk = data.get("hotkeys")
    rounds = hot_rounds(data)
    if not hk or not rounds:
        return
    w("### Hot keys: local budgets")
    w("")
    w(f"**{hk['hot_keys']} hot keys get {hk['hot_share'] * 100:.0f} %** of the asks, the other "
      f"{hk['keys'] - hk['hot_keys']:,} keys the rest, uniform within each (`--hot-keys {hk['hot_keys']} "
      f"--hot-share {hk['hot_share']} -k {hk['keys']}`), C={hk['c']}, M={hk['m']}, one worker in snapshot mode; a "
      f"fixed window of **{hk['max']:,} per {hk['per']}** that the hot keys exceed many times over, Redis INCR "
      "enforcing the same window with a script per ask. sluice's rows use the batching client as it ships (deny "
      "cache on); `budgets on` adds `local_budget = true`, so the client decides a hot key from a slice of its "
      "budget for a short lease"
      + ("" if hk.get("local_budget") else " (**this build has no local budgets: those cells ran with them off**)")
      + ". `uniform` rows: 10,000 uniform keys, none near the limit. Every row once a round, in an order that "
      f"rotates ({len(rounds)} rounds); ratios per round, then the median. Over-admission: units allowed past "
      "`max` in a (key, window); under-admission: units left unadmitted in the (key, window) pairs with a denial; "
      "both counted by the load generator from every answer, placed in its window by its `reset`."
      + (f" Measured {hk['measured']}, with `bench/run.sh --parts hotkeys`, merged into these results."
         if hk.get("measured") else ""))
    w("")
    w("| row | keys | decisions/s (median) | ÷ Redis INCR | ÷ echo ceiling | denied | over-admitted | "
      "under-admitted | from slices | from the deny cache | errors |")
    w("|---|---|---|---|---|---|---|---|---|---|---|")
    for member in HOT_MEMBERS:
        rows = [got[member] for got in rounds.values() if member in got]
        if not rows:
            continue
        good = [r for r in rows if ok(r)]
        med = statistics.median(r["throughput"] for r in good) if good else None
        # Ratios only within the hot-key workload (the uniform rows compare with each other).
        same_load = rows[0]["tags"]["keys"] == "hot"
        vs_redis = hot_ratios(data, member, "redis-incr") if same_load and member != "redis-incr" else []
        vs_echo = hot_ratios(data, member, "echo") if same_load and member != "echo" else []
        adm = hot_admission(data, member)
        shares = [x for x in (local_share(r) for r in good) if x is not None]
        cached = [x for x in (local_share(r, ("deny_cache",)) for r in good) if x is not None]
        errors = sum(r["errors"]["total"] for r in good)
        denied = [r for r in good if r["allowed"] + r["denied"]]
        den = (f"{100 * sum(r['denied'] for r in denied) / sum(r['allowed'] + r['denied'] for r in denied):.0f} %"
               if denied else "–")
        over = f"{adm['over_admitted']:,}" if adm else "–"
        noisy = " ⚠" if any(r.get("machine", {}).get("foreign_cores", 0) > NOISY for r in rows) else ""
        w(f"| {member} | {rows[0]['tags']['keys']} | {kfmt(med)}{noisy} | "
          f"{f'{statistics.median(vs_redis):.2f}×' if vs_redis else '–'} | "
          f"{f'{statistics.median(vs_echo):.2f}×' if vs_echo else '–'} | {den} | "
          f"{over} | {under_text(adm)} | "
          f"{pct(shares)} | {pct(cached)} | {errors} |")
    w("")
