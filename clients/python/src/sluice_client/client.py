""":class:`SluiceClient`: asks, the deny cache, batching, retries, fallback.

An ask first looks in the deny cache (``deny_cache.py``): a key and policy
a worker denied with a retry time are answered locally until then. Else it
goes to the key's owner: with batching (``batch.py``) in its worker's next
batch, else alone as one NATS request on ``rl.allow.<key>`` (the server's
subject mapping takes it to the key's partition and its owner). What the
client does when that gets no decision follows the Rust client
(docs/CLIENT.md, "When no worker answers"):

- *no responders* (the key's partition has no owner right now, e.g. during
  a handover) or a 503 reply: re-sent up to ``no_responders_retries`` times,
  after 2, 4, 8, 16 ms, never past the ask's ``timeout``;
- a partition that has answered only *no responders* for ``down_after`` is
  down: asks for it try once, then fall back at once, until it answers again;
- no reply within ``timeout``, or no connection: the fallback at once.

Then the fallback decides: ``open`` allows (:attr:`Source.FALLBACK_OPEN`),
``closed`` raises :class:`Unavailable`, ``local`` decides with the client's
own limiter over its ``policies`` (``local.py``, :attr:`Source.FALLBACK_LOCAL`).
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import secrets
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Dict, List, Optional, Union

import nats
import nats.errors
from nats.aio.client import Client as NATS

from .alerts import Alert, read_alerts
from .batch import ASK_ALONE, Batcher, Waiter
from .decision import Decision, Source
from .deny_cache import DenyCache
from .errors import SluiceError, Unavailable
from .holds import Held, HoldScope, check_hold, check_ttl, decode_held, hold_body
from .key import Key, encode_key
from .local import LocalLimiter, Policies
from .partition import fnv1a32, partition_of
from .probe import check_partitions
from .usage import Top, Usage, decode_top, decode_usage, query_body
from .wire import (
    DEFAULT_POLICY,
    UNSTORED_HEADER,
    MalformedReply,
    check_cost,
    check_id,
    check_policy,
    decode_reply,
    request_body,
    wait_ms_of,
)

ALLOW_PREFIX = "rl.allow."
HIT_PREFIX = "rl.hit."
# A top query asks every worker: longer than an ask.
QUERY_TIMEOUT = 10.0


class Fallback(str, enum.Enum):
    """What to answer when no worker answers (SPEC §4 ``fallback``)."""

    OPEN = "open"
    CLOSED = "closed"
    LOCAL = "local"

    def __str__(self) -> str:
        return self.value


def _fallback(value: Union[str, Fallback]) -> Fallback:
    try:
        return Fallback(value)
    except ValueError:
        raise ValueError(
            "fallback must be \"open\", \"closed\" or \"local\", not {!r}".format(value)
        ) from None


@dataclass(frozen=True)
class Stats:
    """Counters of a client (:meth:`SluiceClient.stats`)."""

    deny_cache: int
    """Asks the deny cache answered, with no network."""
    batches: int
    """Batch requests sent."""
    batched_asks: int
    """Asks those carried (``batched_asks / batches`` asks per request)."""


class _NoAnswer(Exception):
    """Why no worker decided (the reason the fallback names); ``kind`` is
    ``no_responders``, ``timeout``, ``malformed``, ``unavailable`` or
    ``other``."""

    def __init__(self, why: str, kind: str = "other") -> None:
        super().__init__(why)
        self.kind = kind


_OPTIONS = (
    "timeout",
    "fallback",
    "policies",
    "partitions",
    "batching",
    "deny_cache",
    "deny_cache_capacity",
    "no_responders_retries",
    "no_responders_backoff",
    "down_after",
    "ask_ids",
    "clock",
)


class SluiceClient:
    """An asyncio client for sluice's NATS interface (SPEC §1–§2).

    Make one per process and share it between tasks. Build it with
    :meth:`connect`, or around a NATS connection you already have::

        client = await SluiceClient.connect("nats://127.0.0.1:4222", fallback="open")
        client = SluiceClient(nc, timeout=0.1)

    Options (keyword-only; the Rust client's names and defaults,
    docs/CLIENT.md "Options"):

    - ``timeout`` (seconds, default 0.1): the most one ask takes, retries
      and batch waiting included; then the fallback decides.
    - ``fallback`` (``"closed"`` default, ``"open"`` or ``"local"``).
    - ``policies``: what the ``local`` fallback decides with and ``open``
      takes its numbers from: a mapping of policy names to tables as the
      config file writes them (``{"algorithm": "sliding_log", "limits":
      [{"max": 5, "per": "10s"}]}``), or :meth:`LocalLimiter.from_config`'s
      reading of the workers' ``sluice.toml``. Default: the built-in
      ``default`` policy only.
    - ``partitions`` (default 64): the workers' partition count. Batches
      go straight to a partition's owner, so it must match (a wrong one
      costs round trips, never a wrong decision: the worker answers a
      stray 503 and the client asks it alone).
    - ``batching`` (default true): asks made concurrently for one worker
      travel as one request (``batch.py``).
    - ``deny_cache`` (default true), ``deny_cache_capacity`` (100 000):
      answer a key and policy a worker denied locally until its retry time.
    - ``no_responders_retries`` (4), ``no_responders_backoff`` (0.002 s,
      doubled per retry), ``down_after`` (0.2 s).
    - ``ask_ids`` (default true): every ask of cost 1 or more, and every
      reserve, settle and extend, that the client may send again (after a
      503, also one that says the owner did it in memory but did not store
      it) carries an id of the client's own, the same on every try, so
      that it counts once (SPEC §16). ``id=`` takes the caller's own id
      instead.
    - ``clock`` (default :func:`time.time`): seconds since the epoch, for
      the ``local`` fallback's limiter.
    """

    def __init__(
        self,
        nc: NATS,
        *,
        timeout: float = 0.1,
        fallback: Union[str, Fallback] = Fallback.CLOSED,
        policies: Optional[Policies] = None,
        partitions: int = 64,
        batching: bool = True,
        deny_cache: bool = True,
        deny_cache_capacity: int = 100_000,
        no_responders_retries: int = 4,
        no_responders_backoff: float = 0.002,
        down_after: float = 0.2,
        ask_ids: bool = True,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not timeout > 0:
            raise ValueError("timeout must be positive, not {!r}".format(timeout))
        if partitions < 1:
            raise ValueError("partitions must be at least 1, not {!r}".format(partitions))
        self._nc = nc
        self._owns_connection = False
        self.timeout = float(timeout)
        self.fallback = _fallback(fallback)
        self.partitions = partitions
        self.no_responders_retries = no_responders_retries
        self.no_responders_backoff = no_responders_backoff
        self.down_after = down_after
        self.ask_ids = ask_ids
        self.local = LocalLimiter(policies, clock)
        """The ``local`` fallback's limiter (and ``open``'s numbers)."""
        self._deny = DenyCache(deny_cache_capacity, time.monotonic) if deny_cache else None
        self._batcher = Batcher(partitions, self._batch_round_trip, _NoAnswer) if batching else None
        self._deny_answers = 0
        # Ids of this client's own: a random prefix, then a number.
        self._id_prefix = secrets.token_hex(8)
        self._id_next = itertools.count()
        # partition -> loop time of the first "no responders" of a silent spell
        self._silent_since: Dict[int, float] = {}

    @classmethod
    async def connect(
        cls,
        servers: Union[str, List[str]] = "nats://127.0.0.1:4222",
        *,
        name: str = "sluice-client",
        check_partitions: bool = True,
        **options: Any,
    ) -> "SluiceClient":
        """Connects to NATS and returns a client that owns the connection:
        :meth:`close` closes it. The client's options are those of the
        class; every other keyword goes to :func:`nats.connect` (e.g.
        ``user_credentials=``, ``tls=``). With batching (and
        ``check_partitions``, the default), it first checks that
        ``partitions`` is the server's (:meth:`check_partitions`)."""
        mine = {k: options.pop(k) for k in _OPTIONS if k in options}
        nc = await nats.connect(servers, name=name, **options)
        try:
            client = cls(nc, **mine)
            if client._batcher is not None and check_partitions:
                await client.check_partitions()
        except BaseException:
            await nc.close()
            raise
        client._owns_connection = True
        return client

    async def check_partitions(self) -> None:
        """Checks that the server maps keys to the partitions the client
        computes with ``partitions`` (batches depend on it); raises
        :class:`ValueError` saying what to set. :meth:`connect` does this;
        call it yourself for a client made around your own connection."""
        await check_partitions(self._nc, self.partitions)

    def stats(self) -> Stats:
        """What the client saved: asks answered by the deny cache, batch
        requests and the asks they carried."""
        b = self._batcher
        return Stats(self._deny_answers, b.batches if b else 0, b.batched_asks if b else 0)

    @property
    def nats(self) -> NATS:
        """The NATS connection."""
        return self._nc

    async def close(self) -> None:
        """Closes the NATS connection if :meth:`connect` made it (after
        sending what is buffered: pending :meth:`hit` publishes)."""
        if self._owns_connection and not self._nc.is_closed:
            await self._nc.drain()

    async def __aenter__(self) -> "SluiceClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def allow(
        self,
        key: Key,
        policy: Optional[str] = None,
        cost: int = 1,
        *,
        id: Optional[str] = None,
        wait: Optional[float] = None,
    ) -> Decision:
        """Asks for ``cost`` units of ``policy`` (default ``default``) for
        ``key`` (str or bytes; the client percent-encodes it). A denial is a
        :class:`Decision` with ``allowed`` false; errors are raised
        (:class:`BadRequest`, :class:`UnknownPolicy`, :class:`TooLarge`,
        :class:`Unavailable`, :class:`IdReused`).

        ``id`` (SPEC §16) names the ask: sent again with the same id (a
        retry of yours after a timeout), it counts once, and the answer is
        the first one's with ``repeat`` true. Without it the client names
        the ask itself (``ask_ids``), for its own retries.

        ``wait`` (seconds, whole ms rounded down; SPEC §18) lets the ask
        wait for a later start instead of being denied, up to the policy's
        ``max_wait`` (a ``token_bucket`` or ``gcra`` policy): allowed so,
        the decision's ``wait_ms`` says how long from now the caller
        starts, its units already taken. Such an ask goes alone, never in a
        batch; the ``local`` fallback waits within its own limiter, as the
        Rust client's does. :meth:`acquire` also sleeps until the start."""
        token, policy = self._prepare(key, policy, cost)
        id = self._id_for(cost, id)
        wait_ms = wait_ms_of(wait)
        if self._deny is not None:
            cached = self._deny.get(policy, token, cost, wait_ms / 1000)
            if cached is not None:
                self._deny_answers += 1
                return cached
        if wait_ms > 0:
            return await self._decide(ALLOW_PREFIX + token, token, policy, cost, id, wait_ms=wait_ms)
        if self._batcher is None:
            return await self._decide(ALLOW_PREFIX + token, token, policy, cost, id)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        partition = partition_of(token, self.partitions)
        waiter = Waiter(token, policy, cost, id, partition, loop.create_future())
        outcome = await self._batcher.ask(waiter, deadline)
        if outcome is ASK_ALONE:
            # Asked again with the same id: counted once if the batch was.
            return await self._decide(ALLOW_PREFIX + token, token, policy, cost, id, deadline)
        if isinstance(outcome, _NoAnswer):
            return self._fall_back(token, policy, cost, outcome, record=False)
        return self._conclude(token, cost, outcome)

    async def acquire(
        self,
        key: Key,
        policy: Optional[str] = None,
        cost: int = 1,
        *,
        wait: float,
        id: Optional[str] = None,
    ) -> Decision:
        """:meth:`allow` with ``wait``, then, when allowed for a later
        start, sleeps until it: the caller may start its work as soon as
        this returns an allowed decision (``wait_ms`` says how long it
        slept). A denial returns at once, without sleeping::

            d = await client.acquire("partner-api", "partner", wait=2.0)
            if d.allowed:
                await call_the_partner()
        """
        decision = await self.allow(key, policy, cost, id=id, wait=wait)
        if decision.allowed and decision.wait_ms > 0:
            await asyncio.sleep(decision.wait_ms / 1000)
        return decision

    async def peek(self, key: Key, policy: Optional[str] = None) -> Decision:
        """Whether one unit would be allowed now, consuming nothing (cost 0)."""
        return await self.allow(key, policy, 0)

    async def hit(self, key: Key, policy: Optional[str] = None, cost: int = 1) -> None:
        """Counts ``cost`` units of usage already served (SPEC §2): one
        publish to ``rl.hit.<key>``, recorded whether or not it fits, no
        reply and no fallback (a hit sent while no worker owns the key's
        partition is lost). nats-py buffers the publish (also while it
        reconnects); :meth:`close` or ``client.nats.flush()`` sends it."""
        token, policy = self._prepare(key, policy, cost)
        # While nats-py reconnects it buffers publishes; once closed it cannot.
        if self._nc.is_closed:
            raise Unavailable(
                "cannot publish the hit for key {}: not connected to NATS "
                "(the connection is closed)".format(token)
            )
        try:
            await self._nc.publish(HIT_PREFIX + token, request_body(policy, cost))
        except nats.errors.Error as e:
            raise Unavailable("cannot publish the hit for key {}: {}".format(token, e)) from e

    async def hit_and_peek(self, key: Key, policy: Optional[str] = None, cost: int = 1) -> Decision:
        """Counts ``cost`` units like :meth:`hit`, but as a request: the
        answer is what :meth:`peek` would say after the hit. When no worker
        answers, the fallback applies."""
        token, policy = self._prepare(key, policy, cost)
        return await self._decide(HIT_PREFIX + token, token, policy, cost, self._id_for(cost, None), record=True)

    async def reserve(
        self,
        key: Key,
        policy: Optional[str] = None,
        cost: int = 1,
        *,
        ttl_ms: Optional[int] = None,
        id: Optional[str] = None,
        wait: Optional[float] = None,
    ) -> Held:
        """``rl.reserve.<key>`` (SPEC §13): decides like :meth:`allow`
        with ``cost`` and, when allowed, holds it for ``ttl_ms`` (default
        the policy's ``hold_ttl``) until :meth:`settle`. A denied reserve
        holds nothing (``held.hold`` is ``None``). No fallback: a hold
        lives at its key's owner, so with no worker it raises
        :class:`Unavailable`.

        ``wait`` (seconds; SPEC §18) lets the reserve wait for a later
        start as :meth:`allow`'s does: kept so, its cost is taken at once,
        ``held.decision.wait_ms`` says how long from now the caller starts,
        and the hold's ttl runs from that start. It waits for the rate
        limits only, never for a ``concurrency`` slot. Returns at once.

        ``id`` (SPEC §16) names the verb, as for :meth:`allow`: sent again
        with it, the reserve keeps one hold and is answered as the first
        time (the same hold, ``repeat`` true). Each hold verb takes one."""
        token, policy = self._prepare(key, policy, cost)
        id = self._verb_id(id)
        wait_ms = wait_ms_of(wait) or None
        body = hold_body(policy, cost=cost, ttl_ms=check_ttl(ttl_ms), id=id, wait_ms=wait_ms)
        return await self._hold_verb("rl.reserve." + token, token, body, id)

    async def settle(
        self, key: Key, policy: Optional[str] = None, *, hold: str, cost: int, id: Optional[str] = None
    ) -> Decision:
        """``rl.settle.<key>``: ends the hold and charges ``cost`` (the real
        cost, 0 for work that failed) in its place; the answer is what
        :meth:`peek` says after it. An unknown, settled or ended hold raises
        :class:`UnknownHold` and changes nothing, unless the settle repeats
        the ``id`` of the one that ended it: that is answered as the first
        time."""
        token, policy = self._prepare(key, policy, cost)
        id = self._verb_id(id)
        body = hold_body(policy, hold=check_hold(hold), cost=cost, id=id)
        return (await self._hold_verb("rl.settle." + token, token, body, id)).decision

    async def extend(
        self,
        key: Key,
        policy: Optional[str] = None,
        *,
        hold: str,
        ttl_ms: Optional[int] = None,
        id: Optional[str] = None,
    ) -> Held:
        """``rl.extend.<key>``: keeps a live hold ``ttl_ms`` more from now
        (default the policy's ``hold_ttl``); ``expires_ms`` is its new end."""
        token, policy = self._prepare(key, policy, 0)
        id = self._verb_id(id)
        body = hold_body(policy, hold=check_hold(hold), ttl_ms=check_ttl(ttl_ms), id=id)
        return await self._hold_verb("rl.extend." + token, token, body, id)

    def hold(
        self,
        key: Key,
        policy: Optional[str] = None,
        cost: int = 1,
        *,
        ttl_ms: Optional[int] = None,
        wait: Optional[float] = None,
    ) -> HoldScope:
        """A hold for the length of a block::

            async with client.hold("user-7", policy="llm", cost=4000) as h:
                tokens = await call_the_model(max_tokens=4000)
                await h.settle(tokens)

        Entering reserves (raising :class:`HoldDenied` when denied); with
        ``wait`` (as :meth:`reserve`'s), it then sleeps until the hold's
        start, as :meth:`acquire` does. Leaving without a settle (an
        exception, a cancellation, or no settle at all) releases the hold:
        settles it with cost 0."""
        return HoldScope(self, key, policy, cost, ttl_ms, wait)

    async def _hold_verb(self, subject: str, token: str, body: bytes, id: Optional[str]) -> Held:
        # Unnamed, a verb the owner did in memory must not be sent again (a
        # second reserve would keep a second hold); named, the retry is
        # its repeat.
        try:
            reply = await self._round_trip(
                subject, partition_of(token, self.partitions), body, decode_held, once_done=id is None
            )
        except _NoAnswer as why:
            raise Unavailable(
                "no sluice worker answered on {} ({}); a hold lives at its key's owner, "
                "so there is no fallback: try again once a worker owns the key's partition".format(subject, why)
            ) from None
        if isinstance(reply, SluiceError):
            raise reply
        return reply

    async def usage(
        self,
        key: Key,
        policy: Optional[str] = None,
        from_ms: Optional[int] = None,
        to_ms: Optional[int] = None,
        step: Optional[str] = None,
        timeout: float = QUERY_TIMEOUT,
    ) -> Usage:
        """``key``'s usage history (SPEC §9): by default the last hour
        under ``default``, at the finest step that holds it (``1m``,
        ``5m``, ``1h``, ``1d``). Raises the worker's error for a bad query,
        :class:`Unavailable` when no worker answers."""
        token = encode_key(key)
        if policy is not None:
            check_policy(policy)
        body = query_body(policy=policy, from_ms=from_ms, to_ms=to_ms, step=step)
        msg = await self._query("rl.usage." + token, body, timeout)
        return decode_usage(msg.data, msg.headers)

    async def top(
        self,
        n: int = 10,
        by: str = "used",
        from_ms: Optional[int] = None,
        to_ms: Optional[int] = None,
        policy: Optional[str] = None,
        timeout: float = QUERY_TIMEOUT,
        group: Optional[Union[str, bytes]] = None,
    ) -> Top:
        """The ``n`` keys that used (``by="denied"``: were denied) the most
        in the range (default: the last hour), with their exact totals;
        with ``group`` (a group's first token as asked, ``"acme"``), only
        its members (SPEC §17: ``acme.alice``, ``acme.eng.alice``, not
        ``acme`` itself)."""
        if policy is not None:
            check_policy(policy)
        token = None if group is None else encode_key(group)
        body = query_body(n=n, by=by, from_ms=from_ms, to_ms=to_ms, policy=policy, group=token)
        msg = await self._query("rl.top", body, timeout)
        return decode_top(msg.data, msg.headers)

    def alerts(
        self, policy: Optional[str] = None, *, new_only: bool = False, follow: bool = False
    ) -> AsyncIterator[Alert]:
        """The threshold alerts (SPEC §14) of ``policy`` (every policy
        when ``None``) that ``SLUICE_ALERTS`` keeps, oldest first; with
        ``follow``, each new one as it is stored, without end::

            async for alert in client.alerts("quota", follow=True):
                notify(alert.key, alert.threshold_pct)
        """
        return read_alerts(self._nc, policy, new_only=new_only, follow=follow)

    async def _query(self, subject: str, body: bytes, timeout: float) -> Any:
        try:
            return await self._nc.request(subject, body, timeout=timeout)
        except nats.errors.NoRespondersError:
            raise Unavailable("no worker answered on {} (no responders)".format(subject)) from None
        except nats.errors.TimeoutError:
            raise Unavailable("no answer on {} within {:g} s".format(subject, timeout)) from None
        except nats.errors.Error as e:
            raise Unavailable("cannot ask on {}: {}".format(subject, e)) from None

    @staticmethod
    def _prepare(key: Key, policy: Optional[str], cost: int) -> "tuple[str, str]":
        """Checks what can be checked before sending."""
        token = encode_key(key)
        policy = check_policy(policy)
        check_cost(cost)
        return token, policy

    def _id_for(self, cost: int, id: Optional[str]) -> Optional[str]:
        """The caller's id, checked; else one of the client's own for an
        ask that counts (a peek counts nothing: no id)."""
        if id is not None:
            return check_id(id)
        if self.ask_ids and cost > 0:
            return "{}-{:x}".format(self._id_prefix, next(self._id_next))
        return None

    def _verb_id(self, id: Optional[str]) -> Optional[str]:
        """A hold verb's id: the caller's, checked, else one of the
        client's own (``ask_ids``), whatever its cost: a settle of 0 still
        ends a hold."""
        return self._id_for(1, id)

    async def _decide(
        self,
        subject: str,
        token: str,
        policy: str,
        cost: int,
        id: Optional[str] = None,
        deadline: Optional[float] = None,
        record: bool = False,
        wait_ms: int = 0,
    ) -> Decision:
        """One ask alone on ``subject``, concluded; ``record``: a hit's;
        ``wait_ms``: how long it may wait for its start."""
        partition = partition_of(token, self.partitions)
        body = request_body(policy, cost, id, wait_ms)
        try:
            reply = await self._round_trip(subject, partition, body, deadline=deadline)
        except _NoAnswer as why:
            return self._fall_back(token, policy, cost, why, record, wait_ms)
        # A hit's answer is a peek's: its denial is cached as one of cost 0.
        return self._conclude(token, 0 if record else cost, reply)

    def _conclude(self, token: str, cost: int, reply: Union[Decision, SluiceError]) -> Decision:
        if isinstance(reply, SluiceError):
            raise reply
        if self._deny is not None:
            self._deny.insert(token, cost, reply)
        return reply

    async def _batch_round_trip(
        self, subject: str, body: bytes, partition: Optional[int], decode: Callable[..., Any]
    ) -> Any:
        return await self._round_trip(subject, partition, body, decode)

    async def _round_trip(
        self,
        subject: str,
        partition: Optional[int],
        body: bytes,
        decode: Callable[..., Any] = decode_reply,
        once_done: bool = False,
        deadline: Optional[float] = None,
    ) -> Any:
        """One request with its retries, until ``deadline`` (default: the
        timeout from now); ``decode`` makes the reply (a decision, a
        :class:`Held`, a batch's results) or its typed error, returned.
        ``partition`` is the partition whose owner ``subject`` reaches;
        ``None`` for a worker's own subject, where "no responders" means
        that worker is gone, so a retry cannot help. With ``once_done``
        (the hold verbs without an id), a 503 that says the owner did it in memory
        (``Sluice-Unstored``) is returned, not sent again: a second reserve
        would keep a second hold."""
        loop = asyncio.get_running_loop()
        if deadline is None:
            deadline = loop.time() + self.timeout
        attempt = 0
        while True:
            if not self._nc.is_connected:
                raise _NoAnswer("not connected to NATS", "disconnected")
            left = deadline - loop.time()
            if left <= 0:
                raise _NoAnswer("timed out after {:g} s".format(self.timeout), "timeout")
            try:
                msg = await self._nc.request(subject, body, timeout=left)
            except nats.errors.NoRespondersError:
                if partition is None:
                    raise _NoAnswer("no responders on {}".format(subject), "no_responders") from None
                self._silent_since.setdefault(partition, loop.time())
                why = _NoAnswer("no responders: no worker owns the partition", "no_responders")
            except nats.errors.TimeoutError:
                raise _NoAnswer("timed out after {:g} s".format(self.timeout), "timeout") from None
            except nats.errors.Error as e:
                raise _NoAnswer("NATS error: {}".format(e)) from None
            else:
                if partition is not None:
                    self._silent_since.pop(partition, None)
                try:
                    reply = decode(msg.data, msg.headers)
                except MalformedReply as e:
                    raise _NoAnswer("a malformed reply: {}".format(e), "malformed") from None
                if not isinstance(reply, Unavailable):
                    return reply
                if once_done and (msg.headers or {}).get(UNSTORED_HEADER):
                    return reply
                why = _NoAnswer("the worker is unavailable: {}".format(reply.message), "unavailable")
            # A partition silent for longer than a handover takes is down:
            # fall back after this one try instead of retrying.
            since = self._silent_since.get(partition) if partition is not None else None
            down = since is not None and loop.time() - since >= self.down_after
            if attempt >= self.no_responders_retries or down:
                raise why
            retry_at = loop.time() + self.no_responders_backoff * (1 << min(attempt, 16))
            if retry_at >= deadline:
                raise why
            attempt += 1
            await asyncio.sleep(retry_at - loop.time())

    def _fall_back(
        self, token: str, policy: str, cost: int, why: _NoAnswer, record: bool, wait_ms: int = 0
    ) -> Decision:
        if self.fallback is Fallback.OPEN:
            return self.local.open(policy, cost)
        if self.fallback is Fallback.LOCAL:
            return self.local.decide(token, policy, cost, record, wait_ms)
        raise Unavailable(
            "no sluice worker answered for key {} ({}), and the fallback is \"closed\"".format(token, why)
        )


__all__ = ["SluiceClient", "Fallback", "Stats", "DEFAULT_POLICY", "fnv1a32", "partition_of"]
