"""The ``local`` fallback: an in-process limiter on the workers' algorithms
(the Rust client's, docs/CLIENT.md "When no worker answers"), with the
client's own copy of the policies.

It only sees this process's asks, so with K API servers falling back at
once a key may get up to K times its limit: the price of staying up while
no worker answers. Its counters are never sent to the workers; each is
forgotten once its state is as good as a fresh one.

The five algorithms are ports of ``sluice_core::algorithm`` (nanosecond
integers, the same rounding), so a fallback decides as a worker would
from the same counts: ``tests/test_local.py`` runs them against decisions
the Rust core made (``docs/conformance/decisions.json``). Refused here, with
a sentence: calendar windows (``per = "month"``), which need the core's
time-zone rules. A policy of holds alone (``concurrency`` without limits)
is left out: holds have no fallback.

An ask that may wait (SPEC §18, ``allow(wait=)``) waits here too, as the
Rust client's ``local`` fallback does: within the policy's ``max_wait``,
on a ``token_bucket`` or ``gcra``, it is allowed for the earliest moment
it fits, its units taken at once, and answered ``wait_ms``; this limiter
sees only this process, so K servers falling back pace at up to K times
the rate.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from . import algorithms
from .decision import Decision, Source
from .errors import BadRequest, UnknownPolicy

NS = 1_000_000_000
_UNITS = {"ms": 1_000_000, "s": NS, "m": 60 * NS, "h": 3600 * NS, "d": 86400 * NS}
_DURATION = re.compile(r"([0-9]+)(ms|s|m|h|d)\Z")
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}\Z")
_CALENDAR = ("day", "week", "month")
ALGORITHMS = ("fixed_window", "sliding_log", "sliding_window", "token_bucket", "gcra")
SLIDING_LOG_MAX = 100_000
MAX_WAIT = 60 * NS
_MIN_PRUNE_AT = 1024

Policies = Mapping[str, Mapping[str, Any]]
"""Policy name → its table, as the config file (or ``sluice policy set``) writes it."""


def parse_duration(text: str) -> int:
    """``"10s"`` → nanoseconds (the config's units: ms, s, m, h, d)."""
    m = _DURATION.match(text) if isinstance(text, str) else None
    if m is None or int(m.group(1)) == 0:
        raise ValueError(
            "per {!r} is not a duration such as \"500ms\", \"10s\", \"1m\", \"1h\" or \"1d\"".format(text)
        )
    return int(m.group(1)) * _UNITS[m.group(2)]


@dataclass(frozen=True)
class Limit:
    max: int
    per: int
    """Nanoseconds."""
    burst: int

    @property
    def reported(self) -> int:
        return max(self.max, self.burst)


@dataclass(frozen=True)
class Policy:
    name: str
    algorithm: str
    limits: Tuple[Limit, ...]
    shadow: bool = False
    max_wait: int = 0
    """Nanoseconds an ask may wait for its start (SPEC §18); 0: none."""

    @property
    def capacity(self) -> int:
        bucket = self.algorithm in ("token_bucket", "gcra")
        return min(l.burst if bucket else l.max for l in self.limits)

    @classmethod
    def from_table(cls, name: str, table: Mapping[str, Any]) -> "Policy":
        """A policy from its config table; raises :class:`ValueError` saying what is wrong."""
        where = "policy {!r}".format(name)
        algorithm = table.get("algorithm")
        if algorithm not in ALGORITHMS:
            raise ValueError("{}: algorithm must be one of {}, not {!r}".format(where, ", ".join(ALGORITHMS), algorithm))
        raw = table.get("limits")
        if not isinstance(raw, list) or not raw:
            raise ValueError("{}: limits must be a non-empty list of {{max, per}} tables".format(where))
        limits = []
        for i, l in enumerate(raw):
            at = "{}, limit {}".format(where, i + 1)
            per = l.get("per") if isinstance(l, Mapping) else None
            if per in _CALENDAR:
                raise ValueError(
                    "{}: per = {!r} is a calendar window, which the Python client's local fallback "
                    "cannot decide; use fallback \"open\" or \"closed\" with this policy".format(at, per)
                )
            mx = l.get("max") if isinstance(l, Mapping) else None
            if isinstance(mx, bool) or not isinstance(mx, int) or mx < 1:
                raise ValueError("{}: max must be a whole number of at least 1, not {!r}".format(at, mx))
            burst = l.get("burst")
            if burst is not None and algorithm not in ("token_bucket", "gcra"):
                raise ValueError("{}: burst only applies to token_bucket and gcra".format(at))
            if burst is not None and (isinstance(burst, bool) or not isinstance(burst, int) or burst < 1):
                raise ValueError("{}: burst must be a whole number of at least 1, not {!r}".format(at, burst))
            if algorithm == "sliding_log" and mx > SLIDING_LOG_MAX:
                raise ValueError("{}: a sliding log keeps at most {} units".format(at, SLIDING_LOG_MAX))
            limits.append(Limit(mx, parse_duration(per), burst if burst is not None else mx))
        mode = table.get("mode", "enforce")
        if mode not in ("enforce", "shadow"):
            raise ValueError("{}: mode must be \"enforce\" or \"shadow\", not {!r}".format(where, mode))
        max_wait = 0
        if table.get("max_wait") is not None:
            if algorithm not in ("token_bucket", "gcra"):
                raise ValueError("{}: max_wait only applies to token_bucket and gcra".format(where))
            max_wait = parse_duration(table["max_wait"])
            if max_wait > MAX_WAIT:
                raise ValueError("{}: max_wait is at most 60s".format(where))
        return cls(name, algorithm, tuple(limits), mode == "shadow", max_wait)


BUILTIN_DEFAULT: Mapping[str, Any] = {"algorithm": "sliding_window", "limits": [{"max": 15, "per": "1s"}]}
"""The workers' built-in ``default`` policy: 15 per second, sliding window."""


def load_policies(tables: Optional[Policies]) -> Dict[str, Policy]:
    """Policies from their tables (holds-only ones left out); the built-in
    ``default`` when ``tables`` has none, as the workers do."""
    if tables is not None and not isinstance(tables, Mapping):
        raise ValueError(
            "policies must map policy names to tables such as "
            '{"algorithm": "sliding_log", "limits": [{"max": 10, "per": "1m"}]}, not ' + type(tables).__name__
        )
    policies: Dict[str, Policy] = {}
    for name, table in (tables or {}).items():
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(
                "the policy name {!r} is not valid; policy names are 1 to 64 characters "
                "of A-Z, a-z, 0-9, '_' and '-'".format(name)
            )
        if not isinstance(table, Mapping):
            raise ValueError("policy {!r}: a table (a mapping) of its fields, not {!r}".format(name, table))
        if "algorithm" not in table and "limits" not in table and "concurrency" in table:
            continue
        policies[name] = Policy.from_table(name, table)
    if "default" not in policies:
        policies["default"] = Policy.from_table("default", BUILTIN_DEFAULT)
    return policies


def policies_from_config(path: str) -> Dict[str, Mapping[str, Any]]:
    """The ``[policies]`` tables of the workers' ``sluice.toml``, for
    ``SluiceClient(policies=...)`` (as the Rust client's ``from_config``)."""
    try:
        import tomllib  # type: ignore[import-not-found]
    except ModuleNotFoundError:  # Python < 3.11
        import tomli as tomllib  # type: ignore[no-redef]
    with open(path, "rb") as f:
        return dict(tomllib.load(f).get("policies", {}))


class LocalLimiter:
    """Keys' states by ``(policy, token)``, decided with :class:`Policy`."""

    def __init__(self, tables: Optional[Policies], clock: Callable[[], float]) -> None:
        self.policies = load_policies(tables)
        self._clock = clock
        self._keys: Dict[Tuple[str, str], Tuple[List[Any], int]] = {}
        self._prune_at = _MIN_PRUNE_AT

    def __len__(self) -> int:
        return len(self._keys)

    def _now(self) -> int:
        return int(self._clock() * NS)

    def decide(
        self, token: str, policy_name: str, cost: int, record: bool = False, wait_ms: int = 0
    ) -> Decision:
        """An ask (``record``: a hit) of ``cost`` that may wait up to
        ``wait_ms`` for its start, decided locally, refused as a worker
        would refuse it."""
        policy = self.policies.get(policy_name)
        if policy is None:
            raise UnknownPolicy(
                "no policy named {!r} is known to this client's local fallback; name a configured "
                "policy, or give the client the workers' policies (policies=...)".format(policy_name)
            )
        within = _admit_wait(policy, wait_ms)
        if not record and cost > policy.capacity:
            raise BadRequest(
                "cost {} can never be allowed by policy {!r}, which allows at most {} at once; "
                "split the work into smaller requests".format(cost, policy_name, policy.capacity)
            )
        now = self._now()
        if len(self._keys) >= self._prune_at:
            self._keys = {k: v for k, v in self._keys.items() if v[1] > now}
            self._prune_at = max(len(self._keys) * 2, _MIN_PRUNE_AT)
        key = (policy_name, token)
        states = self._keys[key][0] if key in self._keys else [_new_state(policy.algorithm) for _ in policy.limits]
        d = run(policy, states, now, cost, "record" if record else "allow", within)
        idle = run(policy, states, now, 0, "expiry").reset
        self._keys[key] = (states, now + idle)
        return _decision(d, policy_name, Source.FALLBACK_LOCAL)

    def open(self, policy_name: str, cost: int) -> Decision:
        """The ``open`` fallback's answer: allowed, with the numbers a fresh
        key would get (zeros for a policy the client does not know)."""
        policy = self.policies.get(policy_name)
        if policy is None:
            return Decision(True, 0, 0, 0, 0, policy_name, Source.FALLBACK_OPEN)
        states = [_new_state(policy.algorithm) for _ in policy.limits]
        d = run(policy, states, self._now(), cost, "allow")
        return Decision(True, d.limit, d.remaining, _ms(d.reset), 0, policy_name, Source.FALLBACK_OPEN)


@dataclass
class Raw:
    """A decision in nanoseconds, before it is rounded to milliseconds."""

    allowed: bool
    limit: int
    remaining: int
    reset: int
    retry_after: int
    shadow_denied: bool = False
    wait: int = 0
    """Until its start, when allowed for a later one (SPEC §18)."""


def _ms(ns: int) -> int:
    return -(-ns // 1_000_000)


def _decision(d: Raw, policy: str, source: Source) -> Decision:
    return Decision(
        d.allowed,
        d.limit,
        d.remaining,
        _ms(d.reset),
        _ms(d.retry_after),
        policy,
        source,
        d.shadow_denied,
        wait_ms=_ms(d.wait),
    )


def _admit_wait(policy: Policy, wait_ms: int) -> int:
    """``ask::admit_wait`` of ``sluice_core``: the wait in nanoseconds, or
    the 400 a worker refuses it with."""
    if wait_ms == 0:
        return 0
    if policy.algorithm not in ("token_bucket", "gcra"):
        raise BadRequest(
            "policy {!r} uses {}, which cannot admit an ask for a later moment; send no wait_ms, "
            "or ask a token_bucket or gcra policy that has a max_wait".format(policy.name, policy.algorithm)
        )
    max_ms = _ms(policy.max_wait)
    if wait_ms > max_ms:
        raise BadRequest(
            "wait_ms {} is over policy {!r}'s max_wait of {} ms; send a wait_ms of at most {}, "
            "or raise the policy's max_wait (at most 60s)".format(wait_ms, policy.name, max_ms, max_ms)
        )
    return wait_ms * 1_000_000


def _new_state(algorithm: str) -> Any:
    return algorithms.BY_NAME[algorithm].new()


def run(policy: Policy, states: List[Any], now: int, cost: int, mode: str, within: int = 0) -> Raw:
    """``run_limits`` of ``sluice_core::policy``: ``allow`` takes ``cost``
    from every limit if all have room by ``within`` from now (SPEC §18; 0:
    now), at once, else nothing; ``record`` takes it anyway; ``expiry``
    takes nothing and its ``reset`` is when the state is as good as fresh.
    A shadow policy answers a denial allowed, without a wait."""
    algo = algorithms.BY_NAME[policy.algorithm]
    limits = policy.limits
    for limit, state in zip(limits, states):
        algo.advance(limit, state, now)
    asking = mode == "allow" and cost > 0
    start = 0
    if asking:
        start = _earliest(algo, limits, states, now, cost)
        take = cost if start <= within else 0
    else:
        take = cost if mode == "record" else 0
    # Taken now even when it starts later: the limits go into debt, so
    # later asks queue behind it (``sluice_core::wait``).
    if take > 0:
        for limit, state in zip(limits, states):
            algo.consume(limit, state, now, take)
    if asking:
        asked, allowed = cost, take > 0
    else:
        start = _earliest(algo, limits, states, now, 1)
        asked, allowed = 1, start <= within
    d = _summarize(algo, limits, states, now, asked, allowed, mode)
    if policy.shadow and not d.allowed and mode != "expiry":
        return Raw(True, d.limit, d.remaining, d.reset, 0, True)
    d.wait = start if allowed else 0
    return d


def _earliest(algo: Any, limits: Tuple[Limit, ...], states: List[Any], now: int, cost: int) -> int:
    """How long from ``now`` until ``cost`` fits every limit (0: it fits
    now): the latest of the limits' own (``sluice_core::wait::earliest``)."""
    start = 0
    for limit, state in zip(limits, states):
        fits, retry = algo.check(limit, state, now, cost)
        if not fits:
            start = max(start, retry)
    return start


def _summarize(algo: Any, limits: Tuple[Limit, ...], states: List[Any], now: int, asked: int, allowed: bool, mode: str) -> Raw:
    deciding: Optional[Tuple[int, Tuple[int, int]]] = None
    retry_after = 0
    reset = 0
    for limit, state in zip(limits, states):
        usage = algo.usage(limit, state, now)
        reset = max(reset, usage[1])
        if allowed:
            if deciding is None or usage[0] < deciding[1][0]:
                deciding = (limit.reported, usage)
        else:
            fits, wait = algo.check(limit, state, now, asked)
            if not fits and (deciding is None or wait > retry_after):
                retry_after = wait
                deciding = (limit.reported, usage)
    if deciding is None:
        deciding = (limits[0].reported if limits else 0, (0, 0))
    limit_n, (remaining, limit_reset) = deciding
    return Raw(
        allowed,
        limit_n,
        remaining,
        reset if mode == "expiry" else limit_reset,
        0 if allowed else retry_after,
    )
