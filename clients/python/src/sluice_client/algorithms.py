"""The five limiter algorithms of ``sluice_core::algorithm``, ported line
for line for the ``local`` fallback (``local.py``): times are integer
nanoseconds, states are small mutable lists, and every rounding is the
core's, so that the local limiter answers what a worker would from the
same counts (checked against the core's own decisions in
``tests/test_local.py``).

Each algorithm has ``new()`` (a fresh state), ``advance`` (bookkeeping up
to ``now``), ``check`` (``(allowed, retry_after)`` for ``cost``, changing
nothing), ``consume`` (takes ``cost``, even past the limit) and ``usage``
(``(remaining, reset)``). Python's integers do not overflow, so the core's
saturating arithmetic only shows where a result is cut at 0.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Any, Dict, List, Tuple

NEVER = 2**64 - 1
"""``Nanos::MAX``: a cost that can never fit (callers refuse those)."""

Check = Tuple[bool, int]
Usage = Tuple[int, int]


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class FixedWindow:
    """State ``[start, count]``; windows aligned to multiples of ``per``."""

    @staticmethod
    def new() -> List[int]:
        return [0, 0]

    @staticmethod
    def advance(limit: Any, s: List[int], now: int) -> None:
        now = max(now, s[0])
        start = now - now % limit.per
        if start > s[0]:
            s[0], s[1] = start, 0

    @staticmethod
    def check(limit: Any, s: List[int], now: int, cost: int) -> Check:
        if s[1] + cost <= limit.max:
            return True, 0
        if cost > limit.max:
            return False, NEVER
        return False, max(s[0] + limit.per - now, 0)

    @staticmethod
    def consume(limit: Any, s: List[int], now: int, cost: int) -> None:
        s[1] += cost

    @staticmethod
    def usage(limit: Any, s: List[int], now: int) -> Usage:
        reset = max(s[0] + limit.per - now, 0) if s[1] > 0 else 0
        return max(limit.max - s[1], 0), reset


class SlidingLog:
    """State: the times of the units still counted, oldest first."""

    @staticmethod
    def new() -> List[int]:
        return []

    @staticmethod
    def _effective_now(log: List[int], now: int) -> int:
        return max(now, log[-1]) if log else now

    @staticmethod
    def _first_live(limit: Any, log: List[int], now: int) -> int:
        edge = now - limit.per
        return bisect_right(log, edge) if edge >= 0 else 0

    @classmethod
    def advance(cls, limit: Any, log: List[int], now: int) -> None:
        now = cls._effective_now(log, now)
        del log[: cls._first_live(limit, log, now)]
        if len(log) > limit.max:
            del log[: len(log) - limit.max]

    @classmethod
    def check(cls, limit: Any, log: List[int], now: int, cost: int) -> Check:
        first = cls._first_live(limit, log, cls._effective_now(log, now))
        live = len(log) - first
        if live + cost <= limit.max:
            return True, 0
        if cost > limit.max:
            return False, NEVER
        must_expire = live - (limit.max - cost)
        last = first + must_expire - 1
        expiry = log[last] + limit.per if last < len(log) else 0
        return False, max(expiry - now, 0)

    @classmethod
    def consume(cls, limit: Any, log: List[int], now: int, cost: int) -> None:
        now = cls._effective_now(log, now)
        add = min(cost, limit.max)
        keep = limit.max - add
        if len(log) > keep:
            del log[: len(log) - keep]
        log.extend([now] * add)

    @classmethod
    def usage(cls, limit: Any, log: List[int], now: int) -> Usage:
        first = cls._first_live(limit, log, cls._effective_now(log, now))
        live = len(log) - first
        reset = max(log[-1] + limit.per - now, 0) if live > 0 else 0
        return max(limit.max - live, 0), reset


class SlidingWindow:
    """State ``[start, prev, curr]``: this window's count and the last one's,
    weighted by how much of it the sliding window still covers."""

    @staticmethod
    def new() -> List[int]:
        return [0, 0, 0]

    @staticmethod
    def _view(limit: Any, s: List[int], now: int) -> Tuple[List[int], int]:
        per = limit.per
        now = max(now, s[0])
        nxt = s[0] + per
        if now < nxt:
            v = list(s)
        elif now < nxt + per:
            v = [nxt, s[2], 0]
        else:
            v = [now - now % per, 0, 0]
        elapsed = min(now - min(v[0], now), per - 1)
        return v, elapsed

    @staticmethod
    def _estimate(per: int, prev: int, elapsed: int, units: int) -> int:
        return prev * (per - elapsed) + units * per

    @staticmethod
    def _first_fit(limit: Any, v: List[int], elapsed: int, cost: int) -> int:
        per, mx = limit.per, limit.max
        start, prev, curr = v
        room = mx - curr - cost
        if room >= 0:
            if prev == 0:
                return start + elapsed
            q = room * per // prev
            if q >= 1:
                e = max(per - q, 0)
                return start + max(e, elapsed)
        nxt = start + per
        if cost > mx:
            return NEVER
        room = mx - cost
        if curr == 0:
            return nxt
        q = room * per // curr
        if q >= per:
            return nxt
        if q >= 1:
            return nxt + per - q
        return nxt + per

    @classmethod
    def advance(cls, limit: Any, s: List[int], now: int) -> None:
        s[:] = cls._view(limit, s, now)[0]

    @classmethod
    def check(cls, limit: Any, s: List[int], now: int, cost: int) -> Check:
        v, elapsed = cls._view(limit, s, now)
        if cls._estimate(limit.per, v[1], elapsed, v[2] + cost) <= limit.max * limit.per:
            return True, 0
        return False, max(cls._first_fit(limit, v, elapsed, cost) - now, 0)

    @classmethod
    def consume(cls, limit: Any, s: List[int], now: int, cost: int) -> None:
        v, _ = cls._view(limit, s, now)
        v[2] += cost
        s[:] = v

    @classmethod
    def usage(cls, limit: Any, s: List[int], now: int) -> Usage:
        per = limit.per
        (start, prev, curr), elapsed = cls._view(limit, s, now)
        estimate = cls._estimate(per, prev, elapsed, curr)
        remaining = max(limit.max * per - estimate, 0) // per
        if curr > 0:
            zero_at = start + 2 * per
        elif prev > 0:
            zero_at = start + per
        else:
            zero_at = now
        return remaining, max(zero_at - now, 0)


class TokenBucket:
    """State ``[at, used, frac]``: units taken and not refilled yet as of
    ``at``, and the refill's remainder (in units × ns)."""

    @staticmethod
    def new() -> List[int]:
        return [0, 0, 0]

    @staticmethod
    def _refilled(limit: Any, s: List[int], now: int) -> List[int]:
        at, used, frac = s
        progress = frac + max(now - at, 0) * limit.max
        tokens = progress // limit.per
        at = max(now, at)
        if tokens >= used:
            return [at, 0, 0]
        return [at, used - tokens, progress % limit.per]

    @staticmethod
    def _wait_until_missing(limit: Any, s: List[int], now: int, target: int) -> int:
        need = max((s[1] - target) * limit.per - s[2], 0)
        return max(s[0] + _ceil_div(need, limit.max) - now, 0)

    @classmethod
    def advance(cls, limit: Any, s: List[int], now: int) -> None:
        s[:] = cls._refilled(limit, s, now)

    @classmethod
    def check(cls, limit: Any, s: List[int], now: int, cost: int) -> Check:
        r = cls._refilled(limit, s, now)
        if r[1] + cost <= limit.burst:
            return True, 0
        if cost > limit.burst:
            return False, NEVER
        return False, cls._wait_until_missing(limit, r, now, limit.burst - cost)

    @classmethod
    def consume(cls, limit: Any, s: List[int], now: int, cost: int) -> None:
        r = cls._refilled(limit, s, now)
        r[1] += cost
        s[:] = r

    @classmethod
    def usage(cls, limit: Any, s: List[int], now: int) -> Usage:
        r = cls._refilled(limit, s, now)
        reset = cls._wait_until_missing(limit, r, now, 0) if r[1] > 0 else 0
        return max(limit.burst - r[1], 0), reset


class Gcra:
    """State ``[tat, frac]``: the theoretical arrival time, scaled by
    ``max`` so that the emission interval ``per / max`` stays exact."""

    @staticmethod
    def new() -> List[int]:
        return [0, 0]

    @staticmethod
    def _scaled(limit: Any, s: List[int], now: int) -> Tuple[int, int, int, int]:
        return s[0] * limit.max + s[1], now * limit.max, limit.per, limit.per * limit.burst

    @staticmethod
    def _until(limit: Any, now: int, at: int) -> int:
        return max(min(_ceil_div(at, limit.max), NEVER) - now, 0)

    @staticmethod
    def advance(limit: Any, s: List[int], now: int) -> None:
        pass

    @classmethod
    def check(cls, limit: Any, s: List[int], now: int, cost: int) -> Check:
        tat, snow, t, tau = cls._scaled(limit, s, now)
        cost_t = cost * t
        if max(tat, snow) + cost_t <= snow + tau:
            return True, 0
        if cost > limit.burst:
            return False, NEVER
        return False, cls._until(limit, now, max(tat + cost_t - tau, 0))

    @classmethod
    def consume(cls, limit: Any, s: List[int], now: int, cost: int) -> None:
        tat, snow, t, _ = cls._scaled(limit, s, now)
        tat = max(tat, snow) + cost * t
        whole = tat // limit.max
        s[:] = [whole, tat % limit.max] if whole <= NEVER else [NEVER, 0]

    @classmethod
    def usage(cls, limit: Any, s: List[int], now: int) -> Usage:
        tat, snow, t, tau = cls._scaled(limit, s, now)
        backlog = max(tat - snow, 0)
        reset = cls._until(limit, now, tat) if backlog > 0 else 0
        return max(tau - backlog, 0) // t, reset


BY_NAME: Dict[str, Any] = {
    "fixed_window": FixedWindow,
    "sliding_log": SlidingLog,
    "sliding_window": SlidingWindow,
    "token_bucket": TokenBucket,
    "gcra": Gcra,
}
