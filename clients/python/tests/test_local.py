"""The ``local`` fallback: its algorithms against the decisions the Rust
core made (``docs/conformance/decisions.json``), its limiter on a fake
clock, and the fallback with a nats-server that has no worker."""

from __future__ import annotations

import json
from typing import Any, Dict, List

import pytest

from sluice_client import BadRequest, SluiceClient, Source, UnknownPolicy, Unavailable
from sluice_client import algorithms
from sluice_client.local import LocalLimiter, Policy, policies_from_config, run

from .conftest import PARTITIONS, ROOT, TIMEOUT, fresh


def check_decisions(by_name: Dict[str, Any]) -> List[str]:
    """The steps of ``decisions.json`` that ``local.run`` with the
    algorithms ``by_name`` decides otherwise than the Rust core."""
    wrong = []
    cases = json.loads((ROOT / "docs/conformance/decisions.json").read_text())["cases"]
    saved = dict(algorithms.BY_NAME)
    algorithms.BY_NAME.update(by_name)
    try:
        for case in cases:
            policy = Policy.from_table("p", case["policy"])
            states = [algorithms.BY_NAME[policy.algorithm].new() for _ in policy.limits]
            for i, step in enumerate(case["steps"]):
                d = run(policy, states, step["at"], step["cost"], step["op"], step.get("within_ns", 0))
                got = {
                    "allowed": d.allowed,
                    "limit": d.limit,
                    "remaining": d.remaining,
                    "reset_ns": d.reset,
                    "retry_after_ns": d.retry_after,
                    "shadow_denied": d.shadow_denied,
                    "wait_ns": d.wait,
                }
                want = {k: step.get(k, 0) for k in got}
                if got != want:
                    wrong.append("{}, step {}: want {}, got {}".format(case["name"], i, want, got))
                    break
    finally:
        algorithms.BY_NAME.clear()
        algorithms.BY_NAME.update(saved)
    return wrong


def test_the_algorithms_decide_every_step_as_the_rust_core_does():
    assert check_decisions({}) == []


def test_a_wrong_algorithm_fails_the_decision_vectors():
    class UnalignedWindow(algorithms.FixedWindow):
        """Windows from the first ask, not aligned to multiples of ``per``."""

        @staticmethod
        def advance(limit, s, now):  # type: ignore[no-untyped-def]
            if s[0] == 0 or now >= s[0] + limit.per:
                s[0], s[1] = now, 0

    failures = check_decisions({"fixed_window": UnalignedWindow})
    assert any(f.startswith("fixed window") for f in failures), failures
    assert not any(f.startswith("gcra") for f in failures), failures


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


LOGIN = {"algorithm": "sliding_log", "limits": [{"max": 3, "per": "10s"}]}


def test_the_limiter_limits_like_a_worker_and_forgets_idle_keys():
    clock = FakeClock()
    local = LocalLimiter({"default": LOGIN}, clock)
    answers = [local.decide("alice", "default", 1) for _ in range(4)]
    assert [a.allowed for a in answers] == [True, True, True, False]
    assert answers[3].retry_after_ms == 10_000 and answers[3].source is Source.FALLBACK_LOCAL
    assert local.decide("bob", "default", 1).allowed
    with pytest.raises(UnknownPolicy, match="nope"):
        local.decide("alice", "nope", 1)
    with pytest.raises(BadRequest, match="at most 3"):
        local.decide("alice", "default", 4)
    hit = local.decide("bob", "default", 5, record=True)  # a hit counts past the limit
    assert (hit.allowed, hit.remaining) == (False, 0)
    clock.now += 10
    assert local.decide("alice", "default", 1).allowed
    for i in range(1024 - len(local)):  # the map's first prune is at 1024 keys
        local.decide("k{}".format(i), "default", 1)
    clock.now += 11
    local.decide("late", "default", 1)
    assert len(local) == 1, "idle keys are dropped as the map grows"


def test_policies_are_read_from_tables_and_refused_with_a_reason(tmp_path):
    local = LocalLimiter(None, FakeClock())
    assert local.policies["default"].algorithm == "sliding_window"  # the workers' built-in
    assert local.open("default", 1).limit == 15
    assert local.open("unknown", 1).limit == 0
    for table, reason in [
        ({"algorithm": "fixed_window", "limits": [{"max": 5, "per": "month"}]}, "calendar"),
        ({"algorithm": "sliding_log", "limits": [{"max": 5, "per": "1m", "burst": 2}]}, "burst"),
        ({"algorithm": "sliding_log", "limits": [{"max": 5, "per": "soon"}]}, "duration"),
        ({"algorithm": "leaky", "limits": [{"max": 5, "per": "1m"}]}, "algorithm"),
        ({"algorithm": "gcra", "limits": []}, "limits"),
    ]:
        with pytest.raises(ValueError, match=reason):
            LocalLimiter({"p": table}, FakeClock())
    for policies, reason in [(["default"], "must map"), ({"a.b": LOGIN}, "not valid"), ({"p": 5}, "a table")]:
        with pytest.raises(ValueError, match=reason):
            LocalLimiter(policies, FakeClock())  # type: ignore[arg-type]
    config = tmp_path / "sluice.toml"
    config.write_text(
        'partitions = 8\n\n[policies.login]\nalgorithm = "gcra"\nlimits = [ { max = 10, per = "1m" } ]\n\n'
        "[policies.slots]\nconcurrency = 3\n"
    )
    local = LocalLimiter(policies_from_config(str(config)), FakeClock())
    assert sorted(local.policies) == ["default", "login"], "holds alone have no fallback"


PACED = {"algorithm": "gcra", "max_wait": "2s", "limits": [{"max": 20, "per": "1s", "burst": 1}]}


def test_the_limiter_admits_an_ask_that_may_wait_for_its_start_as_a_worker_does():
    clock = FakeClock()
    local = LocalLimiter({"paced": PACED, "default": LOGIN}, clock)
    waits = [local.decide("p", "paced", 1, wait_ms=120).wait_ms for _ in range(3)]
    assert waits == [0, 50, 100], "one start every 50 ms, taken at once"
    denied = local.decide("p", "paced", 1, wait_ms=120)
    assert not denied.allowed and denied.wait_ms == 0 and denied.retry_after_ms == 150
    assert local.decide("p", "paced", 1, wait_ms=150).wait_ms == 150, "the denial took nothing"
    assert not local.decide("p", "paced", 1).allowed, "in debt: an ask without a wait is denied"
    clock.now += 1
    assert local.decide("p", "paced", 1, wait_ms=120).wait_ms == 0
    for name, wait_ms, reason in [("paced", 2001, "max_wait of 2000 ms"), ("default", 5, "cannot admit")]:
        with pytest.raises(BadRequest, match=reason):
            local.decide("p", name, 1, wait_ms=wait_ms)
    with pytest.raises(ValueError, match="max_wait only applies"):
        LocalLimiter({"p": dict(LOGIN, max_wait="1s")}, clock)


async def test_with_no_worker_the_local_fallback_decides_from_the_clients_policies(bare_nats):
    clock = FakeClock()
    async with await SluiceClient.connect(
        bare_nats, timeout=TIMEOUT, partitions=PARTITIONS, fallback="local", policies={"default": LOGIN}, clock=clock
    ) as client:
        key = fresh("local")
        answers = [await client.allow(key) for _ in range(4)]
        assert [a.allowed for a in answers] == [True, True, True, False]
        assert all(a.source is Source.FALLBACK_LOCAL for a in answers)
        assert answers[3].headers()["Retry-After"] == "10"
        # the local limiter's denials are not cached: the workers may be back
        assert (await client.allow(key)).source is Source.FALLBACK_LOCAL
        other = fresh("local-hit")
        after = await client.hit_and_peek(other, cost=3)
        assert (after.allowed, after.remaining, after.source) == (False, 0, Source.FALLBACK_LOCAL)
        with pytest.raises(UnknownPolicy):
            await client.allow(key, "nope")
        clock.now += 10
        assert (await client.allow(key)).allowed
    paced = {"default": LOGIN, "paced": PACED}
    async with await SluiceClient.connect(
        bare_nats, timeout=TIMEOUT, partitions=PARTITIONS, fallback="local", policies=paced, clock=clock
    ) as client:
        key = fresh("local-wait")
        waits = [(await client.allow(key, "paced", wait=1.0)).wait_ms for _ in range(3)]
        assert waits == [0, 50, 100], "the local fallback waits as the Rust one does"
    async with await SluiceClient.connect(
        bare_nats, timeout=TIMEOUT, partitions=PARTITIONS, fallback="open", policies={"default": LOGIN}
    ) as client:
        d = await client.allow(fresh("open"))
        assert (d.allowed, d.limit, d.remaining, d.source) == (True, 3, 2, Source.FALLBACK_OPEN)
    async with await SluiceClient.connect(bare_nats, timeout=TIMEOUT, partitions=PARTITIONS) as client:
        with pytest.raises(Unavailable, match="closed"):
            await client.allow(fresh("closed"))
