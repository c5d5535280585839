"""The decision a worker (or the fallback) gives: :class:`Decision`."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Dict, Optional, Tuple


class Source(str, enum.Enum):
    """Who decided. The values are the Rust client's (``Source::as_str``)
    and the HTTP gateway's ``Sluice-Source`` header."""

    WORKER = "worker"
    """The key's owning worker."""
    DENY_CACHE = "deny_cache"
    """The client's deny cache: a worker denied this key and policy, and
    its retry time has not passed (answered without the network)."""
    FALLBACK_OPEN = "fallback_open"
    """No worker answered and the fallback is ``open``: allowed, unchecked."""
    FALLBACK_LOCAL = "fallback_local"
    """No worker answered and the fallback is ``local``: decided by the
    client's own limiter, which sees only this process's asks."""

    def __str__(self) -> str:
        return self.value


def _secs_ceil(ms: int) -> int:
    return -(-ms // 1000)


@dataclass(frozen=True)
class Level:
    """One level of a grouped decision (SPEC §17): its policy, what is
    left there and when it is whole again."""

    policy: str
    remaining: int
    reset_ms: int


@dataclass(frozen=True)
class Decision:
    """A decision: the SPEC §1 reply fields and its :class:`Source`.

    A denial is a decision (``allowed`` false, ``retry_after_ms`` > 0), not
    an error.
    """

    allowed: bool
    """The request may proceed; when true, its cost was consumed."""
    limit: int
    """The limit that decided (the most restrictive one)."""
    remaining: int
    """What is left of that limit after this request."""
    reset_ms: int
    """Milliseconds until that limit is fully available again (rounded up)."""
    retry_after_ms: int
    """0 when allowed; else the earliest time, in ms, at which the same
    request can be allowed (rounded up)."""
    policy: str
    """The policy applied."""
    source: Source = Source.WORKER
    shadow_denied: bool = False
    """A shadow policy (SPEC §14) would have denied this ask: it is
    allowed, and nothing was consumed."""
    repeat: bool = False
    """The answer to an ask that repeated the id of one already admitted
    (SPEC §16): the first answer's decision, nothing counted again."""
    wait_ms: int = 0
    """An ask that may wait (``wait=``, SPEC §18) allowed for a later
    start: ms from now (rounded up) until the caller starts, its units
    taken at once; 0 otherwise. :meth:`SluiceClient.acquire` has slept it."""
    levels: Tuple[Level, ...] = ()
    """A grouped ask's levels (SPEC §17), outermost first; empty for a
    plain key and for the fallback's answers."""
    denied_by: Optional[str] = None
    """The policy of the level that denied a grouped ask: the
    organisation's, say, while the user still had room."""
    blocked: bool = False
    """A denial because the key is blocked under a policy's ``block_for``
    (SPEC §18): every ask of it is denied, a peek and an ask that may wait
    too, until ``retry_after`` (the block's rest)."""

    @property
    def reset(self) -> float:
        """``reset_ms`` in seconds."""
        return self.reset_ms / 1000

    @property
    def wait(self) -> float:
        """``wait_ms`` in seconds."""
        return self.wait_ms / 1000

    @property
    def retry_after(self) -> float:
        """``retry_after_ms`` in seconds."""
        return self.retry_after_ms / 1000

    def headers(self) -> Dict[str, str]:
        """The headers an HTTP server should return with this decision, as a
        worker sets them on its NATS reply (SPEC §1): ``RateLimit-Limit``,
        ``RateLimit-Remaining``, ``RateLimit-Reset`` and, on a denial,
        ``Retry-After``; times in whole seconds, rounded up."""
        headers = {
            "RateLimit-Limit": str(self.limit),
            "RateLimit-Remaining": str(self.remaining),
            "RateLimit-Reset": str(_secs_ceil(self.reset_ms)),
        }
        if not self.allowed:
            headers["Retry-After"] = str(_secs_ceil(self.retry_after_ms))
        if self.shadow_denied:
            headers["Sluice-Shadow"] = "denied"
        return headers
