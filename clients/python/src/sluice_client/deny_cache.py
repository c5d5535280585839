"""The deny cache: a worker's denial with a retry time is remembered, and
asks for the same key and policy are answered from it until then, with no
network (the Rust client's, docs/CLIENT.md "The deny cache").

Why this is safe: ``retry_after`` is the earliest time at which *the same
request* can be allowed, and nothing but time makes a key less used (other
callers only use it up further). So until then, any ask of that key and
policy with at least the denied cost would be denied by the worker too. An
ask with a *smaller* cost might fit earlier, so it goes to the worker; a
peek (cost 0) asks about one unit, so it counts as cost 1 here.

The retry time is counted from when the reply arrived, a little after the
worker decided (and ``retry_after_ms`` is rounded up), so the cache never
answers past the real retry time. What it cannot see (a config change that
raises the limit, counters lost in a crash in snapshot mode) can only make
a worker allow sooner: the cache errs on the side of denying, for at most
the retry time it was told.

A grouped ask (SPEC §17) is cached under its own policy and whole token
(``user``, ``acme.alice``), whichever level denied it, and answers only
that same ask: its levels are the same counters, and the denying level
(the organisation's) is freed by nothing but time either. It is not
cached under the organisation's key, so a denial of alice by her
organisation never answers bob from the cache: his ask goes to the
worker. The answer keeps the denial's ``levels`` (their ``reset_ms``
counted down) and ``denied_by``.

One dict, bounded: expired entries are dropped when it grows, and a full
cache stops caching rather than evicting. asyncio runs one task at a time,
so it needs no lock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

from .decision import Decision, Level, Source

Clock = Callable[[], float]
"""Seconds on a clock that never goes back (``time.monotonic``)."""

_MIN_PRUNE_AT = 64


@dataclass(frozen=True)
class _Denied:
    until: float
    cost: int
    limit: int
    remaining: int
    reset_at: float
    levels: Tuple[Level, ...] = ()
    denied_by: Optional[str] = None
    at: float = 0.0
    blocked: bool = False
    """The key is blocked until ``until`` (SPEC §18): every ask is denied."""


class DenyCache:
    """Denials by ``(policy, token)``, at most ``capacity`` of them."""

    def __init__(self, capacity: int, clock: Clock) -> None:
        if capacity < 1:
            raise ValueError("deny_cache_capacity must be at least 1, not {!r}".format(capacity))
        self._capacity = capacity
        self._clock = clock
        self._map: Dict[Tuple[str, str], _Denied] = {}
        self._prune_at = min(_MIN_PRUNE_AT, capacity)

    def __len__(self) -> int:
        return len(self._map)

    def clear(self) -> None:
        """Forgets every denial."""
        self._map.clear()

    def get(self, policy: str, token: str, cost: int, wait: float = 0.0) -> Optional[Decision]:
        """The cached denial of ``policy``/``token`` that covers ``cost``
        asked with up to ``wait`` seconds for its start: the worker admits
        an ask whose moment comes within its wait, so only a retry time
        further off than that is certain to be denied. A blocked key's
        denial (SPEC §18) covers every cost and wait until the block ends."""
        d = self._map.get((policy, token))
        if d is None:
            return None
        now = self._clock()
        if d.blocked:
            if d.until <= now:
                return None
        elif d.until - now <= wait or max(cost, 1) < d.cost:
            return None
        return Decision(
            allowed=False,
            limit=d.limit,
            remaining=d.remaining,
            reset_ms=_ms_ceil(max(d.reset_at - now, 0.0)),
            retry_after_ms=max(_ms_ceil(d.until - now), 1),
            policy=policy,
            source=Source.DENY_CACHE,
            levels=tuple(
                Level(l.policy, l.remaining, max(l.reset_ms - int((now - d.at) * 1000), 0)) for l in d.levels
            ),
            denied_by=d.denied_by,
            blocked=d.blocked,
        )

    def insert(self, token: str, cost: int, decision: Decision) -> None:
        """Remembers a worker's denial of ``cost`` (a peek counts as 1)."""
        if decision.allowed or decision.retry_after_ms == 0:
            return
        key = (decision.policy, token)
        now = self._clock()
        denied = _Denied(
            until=now + decision.retry_after_ms / 1000,
            # A block denies every cost: it covers them all.
            cost=0 if decision.blocked else max(cost, 1),
            limit=decision.limit,
            remaining=decision.remaining,
            reset_at=now + decision.reset_ms / 1000,
            levels=decision.levels,
            denied_by=decision.denied_by,
            at=now,
            blocked=decision.blocked,
        )
        if len(self._map) >= self._prune_at and key not in self._map:
            self._map = {k: d for k, d in self._map.items() if d.until > now}
            self._prune_at = min(max(len(self._map) * 2, _MIN_PRUNE_AT), self._capacity)
            if len(self._map) >= self._capacity:
                return
        old = self._map.get(key)
        # A smaller denied cost covers more asks: keep the smallest one
        # still in force, or the later one for equal costs.
        if old is not None and old.until > now and old.cost < denied.cost:
            return
        if old is not None and old.blocked and old.until > denied.until:
            return
        self._map[key] = denied


def _ms_ceil(seconds: float) -> int:
    return int(math.ceil(seconds * 1000 - 1e-9))
