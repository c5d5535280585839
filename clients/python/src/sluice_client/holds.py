"""Holds (SPEC §13, docs/HOLDS.md): reserve a cost now, settle the real
cost later; limits on requests in flight.

- :class:`Held`: what a reserve or an extend answers: the decision, and
  the hold it kept (``hold``, ``expires_ms``; ``None`` when denied).
- :class:`Hold` and :class:`HoldScope`: ``async with client.hold(...) as
  h`` reserves on entry (raising :class:`HoldDenied` when denied), and on
  exit releases the hold (settles it with cost 0) unless ``await
  h.settle(cost)`` ended it: an exception, a cancellation or a plain exit
  without a settle gives back what was held.

The verbs themselves are methods of :class:`~sluice_client.SluiceClient`
(``reserve``, ``settle``, ``extend``, ``hold``); this module holds their
bodies, their replies and the scope.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Optional, Union

import msgpack

from .decision import Decision
from .errors import BadRequest, SluiceError
from .wire import decode_reply, reply_map

if TYPE_CHECKING:  # pragma: no cover
    from .client import SluiceClient
    from .key import Key

log = logging.getLogger(__name__)

MAX_TTL_MS = 3_600_000
_HEX = frozenset("0123456789abcdef")


def check_ttl(ttl_ms: Optional[int]) -> Optional[int]:
    """Raises :class:`BadRequest` for a ttl no worker accepts."""
    if ttl_ms is None:
        return None
    if isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int) or not 1 <= ttl_ms <= MAX_TTL_MS:
        raise BadRequest(
            "ttl_ms {!r} is not valid: a hold lives 1 ms to 1 h ({} ms); "
            "leave it out for the policy's hold_ttl".format(ttl_ms, MAX_TTL_MS)
        )
    return ttl_ms


def check_hold(hold: str) -> str:
    """Raises :class:`BadRequest` for a hold id that is not 32 hex digits."""
    if not isinstance(hold, str) or len(hold) != 32 or not set(hold) <= _HEX:
        raise BadRequest(
            "the hold {!r} is not a hold id (32 lower-case hex digits, as the "
            "reserve's reply names it)".format(hold)
        )
    return hold


def hold_body(policy: str, **fields: Optional[Union[int, str]]) -> bytes:
    """A hold verb's MessagePack body: ``policy`` and the given fields."""
    body = {"policy": policy}
    body.update({k: v for k, v in fields.items() if v is not None})
    return msgpack.packb(body)


@dataclass(frozen=True)
class Held:
    """A reserve's or an extend's answer."""

    decision: Decision
    hold: Optional[str] = None
    """The hold's name, for settle and extend; ``None`` when denied."""
    expires_ms: Optional[int] = None
    """Milliseconds until it ends by itself."""

    @property
    def allowed(self) -> bool:
        return self.decision.allowed


def decode_held(data: bytes, headers: Optional[Mapping[str, str]] = None) -> Union[Held, SluiceError]:
    """A hold verb's reply: :class:`Held`, or the typed error (returned)."""
    reply = decode_reply(data, headers)
    if isinstance(reply, SluiceError):
        return reply
    body = reply_map(data)
    hold, expires_ms = body.get("hold"), body.get("expires_ms")
    return Held(
        decision=reply,
        hold=hold if isinstance(hold, str) else None,
        expires_ms=expires_ms if isinstance(expires_ms, int) else None,
    )


class HoldDenied(Exception):
    """``client.hold(...)`` was denied: nothing is held. ``decision`` says
    why and when to retry (``retry_after``)."""

    def __init__(self, decision: Decision) -> None:
        super().__init__(
            "the reserve under {!r} was denied; retry in {:g} s".format(decision.policy, decision.retry_after)
        )
        self.decision = decision


class Hold:
    """A live hold inside ``async with client.hold(...) as h``."""

    def __init__(self, client: "SluiceClient", key: "Key", policy: Optional[str], held: Held) -> None:
        self._client = client
        self._key = key
        self._policy = policy
        self.decision = held.decision
        assert held.hold is not None
        self.hold: str = held.hold
        self.expires_ms: Optional[int] = held.expires_ms
        self.settled: Optional[Decision] = None
        """The settle's answer once settled (or released)."""

    async def settle(self, cost: int) -> Decision:
        """Ends the hold charging ``cost`` (the real cost). Once only: the
        scope then releases nothing."""
        if self.settled is not None:
            raise RuntimeError("hold {} is already settled".format(self.hold))
        decision = await self._client.settle(self._key, self._policy, hold=self.hold, cost=cost)
        self.settled = decision
        return decision

    async def release(self) -> Decision:
        """Ends the hold charging nothing (work that failed)."""
        return await self.settle(0)

    async def extend(self, ttl_ms: Optional[int] = None) -> Decision:
        """Keeps the hold ``ttl_ms`` more from now (default the policy's
        hold_ttl)."""
        held = await self._client.extend(self._key, self._policy, hold=self.hold, ttl_ms=ttl_ms)
        self.expires_ms = held.expires_ms
        return held.decision


class HoldScope:
    """``async with client.hold(key, policy=..., cost=...) as h``: see the
    module's doc."""

    def __init__(
        self,
        client: "SluiceClient",
        key: "Key",
        policy: Optional[str],
        cost: int,
        ttl_ms: Optional[int],
        wait: Optional[float] = None,
    ) -> None:
        self._args = (client, key, policy, cost, ttl_ms, wait)
        self._hold: Optional[Hold] = None

    async def __aenter__(self) -> Hold:
        client, key, policy, cost, ttl_ms, wait = self._args
        held = await client.reserve(key, policy, cost, ttl_ms=ttl_ms, wait=wait)
        if not held.allowed:
            raise HoldDenied(held.decision)
        self._hold = Hold(client, key, policy, held)
        if held.decision.wait_ms > 0:
            # Kept for a later start (SPEC §18): the block begins there. A
            # cancellation meanwhile leaves through __aexit__'s release.
            try:
                await asyncio.sleep(held.decision.wait_ms / 1000)
            except BaseException:
                await self.__aexit__()
                raise
        return self._hold

    async def __aexit__(self, *exc: Any) -> None:
        hold = self._hold
        if hold is None or hold.settled is not None:
            return
        try:
            await hold.release()
        except SluiceError as e:
            # The hold ends at its ttl as the policy's on_expiry says; the
            # body's own exception, if any, is what the caller must see.
            log.warning("releasing hold %s failed (%s); it ends at its ttl", hold.hold, e)
