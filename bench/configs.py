"""The worker configs the benchmark parts run with: the matrix's (every
algorithm at 100 per second, in a given durability), the hot-key workload
(docs/CLIENT.md, "Local budgets") and its config with local budgets off and on, the
memory/restore config and the holds' (docs/HOLDS.md); plus where the repository is and the algorithms.

Kept in one place so that every part (parts_*.py) and the build probes
(bench/harness.py) run the same policies.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ALGORITHMS = ["fixed_window", "sliding_log", "sliding_window", "token_bucket", "gcra"]


def matrix_config(durability):
    lines = ["partitions = 64", f'durability = "{durability}"', "",
             "[policies.default]", 'algorithm = "sliding_window"', 'limits = [ { max = 100, per = "1s" } ]', ""]
    for a in ALGORITHMS:
        lines += [f"[policies.{a}]", f'algorithm = "{a}"', 'limits = [ { max = 100, per = "1s" } ]', ""]
    return "\n".join(lines)


# The hot-key workload (docs/BENCHMARKS.md, "Hot keys"): C=64 over M=2 connections, 10,000 keys of
# which 10 get half of all asks. Its fixed window is one the hot keys exceed
# many times over (each gets ~5 % of all asks, thousands per second) while
# the other keys stay far under it (~1/20,000 of the asks each).
HOT = {"keys": 10_000, "hot_keys": 10, "hot_share": 0.5, "c": 64, "m": 2, "max": 2000, "per": "1s"}


def hotkeys_config(local_budget):
    """One worker config with the hot-key policy twice: `hot` (budgets off)
    and `hot_budget`, the same limit with local budgets on where this build
    has them (the one line below)."""
    limit = f'limits = [ {{ max = {HOT["max"]}, per = "{HOT["per"]}" }} ]'
    lines = ["partitions = 64", 'durability = "snapshot"', "",
             "[policies.hot]", 'algorithm = "fixed_window"', limit, "",
             "[policies.hot_budget]", 'algorithm = "fixed_window"', limit]
    if local_budget:
        lines.append("local_budget = true")
    return "\n".join(lines) + "\n"


MILLION_CONFIG = """partitions = 64
durability = "snapshot"

[policies.default]
algorithm = "sliding_window"
limits = [ { max = 10, per = "1m" }, { max = 500, per = "1h" } ]
"""


# The holds part (docs/HOLDS.md): the matrix's `default` limit, holds that live
# an hour unless settled (the memory test keeps them).
HOLDS_POLICY = "holds"


def holds_config():
    return "\n".join(["partitions = 64", 'durability = "snapshot"', "",
                      "[policies.default]", 'algorithm = "sliding_window"', 'limits = [ { max = 100, per = "1s" } ]',
                      "", f"[policies.{HOLDS_POLICY}]", 'algorithm = "sliding_window"',
                      'limits = [ { max = 100, per = "1s" } ]', 'hold_ttl = "1h"', ""])
