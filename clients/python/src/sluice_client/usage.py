"""Usage history (SPEC §9): the replies of ``rl.usage.<key>`` and
``rl.top`` as typed values, and their request bodies.

Queries go to the workers as they are (no retries, no fallback: with no
worker there is no history); a refused query raises the typed error the
worker sent (400 :class:`BadRequest` for a bad range, step or ``n``, 404
:class:`UnknownPolicy`, 503 :class:`Unavailable`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional
from urllib.parse import unquote_to_bytes

import msgpack

from .errors import SluiceError
from .wire import MalformedReply, error_of, reply_map


@dataclass(frozen=True)
class UsagePoint:
    """One bucket of a series: its start and its counts."""

    t_ms: int
    used: int
    denied: int


@dataclass(frozen=True)
class UsagePart:
    """A span of a series and the step its points have."""

    from_ms: int
    to_ms: int
    step_ms: int


@dataclass(frozen=True)
class Usage:
    """A key's usage: ``points`` oldest first, one per step of each part."""

    key: str
    policy: str
    step_ms: int
    points: List[UsagePoint]
    complete_to_ms: int
    parts: List[UsagePart]

    @property
    def used(self) -> int:
        """Units used over the whole range."""
        return sum(p.used for p in self.points)

    @property
    def denied(self) -> int:
        """Units denied over the whole range."""
        return sum(p.denied for p in self.points)


@dataclass(frozen=True)
class TopEntry:
    """One key of a :class:`Top`: ``key`` as it was asked (``bob@x.io``; a
    key whose bytes are not UTF-8 shows U+FFFD), ``key_token`` its token
    (``bob%40x%2Eio``), what ``usage`` and ``rl.usage.<key>`` take exactly."""

    key: str
    key_token: str
    policy: str
    used: int
    denied: int


@dataclass(frozen=True)
class Top:
    """The keys with the largest totals in ``[from_ms, to_ms)``, largest first."""

    by: str
    from_ms: int
    to_ms: int
    keys: List[TopEntry]
    complete_to_ms: int


def query_body(**fields: Any) -> bytes:
    """A MessagePack map of the fields that are given (empty: every default)."""
    given: Dict[str, Any] = {k: v for k, v in fields.items() if v is not None}
    return msgpack.packb(given) if given else b""


def _reply(data: bytes, headers: Optional[Mapping[str, str]]) -> Mapping[str, Any]:
    body = reply_map(data)
    error = error_of(body, headers)
    if error is not None:
        raise error
    return body


def decode_usage(data: bytes, headers: Optional[Mapping[str, str]] = None) -> Usage:
    """An ``rl.usage`` reply; raises the worker's error or :class:`MalformedReply`."""
    b = _reply(data, headers)
    try:  # a missing field or a wrong type: malformed
        return Usage(
            key=b["key"],
            policy=b["policy"],
            step_ms=b["step_ms"],
            points=[UsagePoint(p["t_ms"], p["used"], p["denied"]) for p in b["points"]],
            complete_to_ms=b["complete_to_ms"],
            parts=[UsagePart(p["from_ms"], p["to_ms"], p["step_ms"]) for p in b["parts"]],
        )
    except (KeyError, TypeError) as e:
        raise MalformedReply("a usage reply without {}".format(e)) from None


def _top_entry(k: Mapping[str, Any]) -> TopEntry:
    token = k.get("key_token")
    if token is None:  # a worker from before key_token: "key" is the token
        token = k["key"]
        key = unquote_to_bytes(token).decode("utf-8", "replace")
    else:
        key = k["key"]
    return TopEntry(key, token, k["policy"], k["used"], k["denied"])


def decode_top(data: bytes, headers: Optional[Mapping[str, str]] = None) -> Top:
    """An ``rl.top`` reply; raises the worker's error or :class:`MalformedReply`."""
    b = _reply(data, headers)
    try:
        return Top(
            by=b["by"],
            from_ms=b["from_ms"],
            to_ms=b["to_ms"],
            keys=[_top_entry(k) for k in b["keys"]],
            complete_to_ms=b["complete_to_ms"],
        )
    except (KeyError, TypeError, AttributeError) as e:
        raise MalformedReply("a top reply without {}".format(e)) from None


__all__ = ["Usage", "UsagePoint", "UsagePart", "Top", "TopEntry", "SluiceError"]
