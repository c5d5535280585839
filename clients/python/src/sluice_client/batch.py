"""Batching: concurrent asks for one worker share one NATS request, as in
the Rust client (docs/CLIENT.md "Batching"; the format: docs/PROTOCOL.md §5).

A NATS round trip costs about as much as a worker's decision, so the more
asks travel per request, the more decisions a connection carries. The unit
of batching (a *destination*) is the worker that owns the asks' partitions:
every batch reply names its worker (header ``Sluice-Worker``), and the
client keeps a partition → worker map from them. Asks of a partition with
a known owner go to that worker on ``rl.w.<worker-id>.batch``, all its
partitions together; asks of a partition whose owner is unknown go to
``rl.p.<n>.batch`` (even a lone ask, so that its reply teaches the owner).

Each destination has a queue and two *turns* (at most two requests of this
client in flight per destination):

- an ask that finds its destination idle takes a turn and goes at once,
  alone: an ask with nothing to batch with waits for nothing;
- an ask that finds one request in flight takes the second turn, queues,
  and yields once to the event loop, so that the asks arriving in the same
  tick queue behind it; then it sends everything queued as one request;
- asks that arrive while both turns are taken queue up (FIFO);
- when a request returns, its turn is handed on: up to 256 queued asks
  leave together, sent by a task of their own.

Per item: a 503 in an item's slot (the worker does not own that key's
partition now) makes the client forget that partition's owner, and the
caller asks again alone on ``rl.allow.<key>``, with the same id, so it
counts once. A worker subject with no responders means that worker is
gone: its partitions are forgotten and every caller asks alone. A
partition's batch subject with no responders (after the quick retries)
means the partition has no owner: its callers fall back at once. A batch
the worker refuses whole (a client bug) fails every item with its error.

Only asks travel in batches here; the hold verbs and ``hit_and_peek`` go
alone on their own subjects.
"""

from __future__ import annotations

import asyncio
import collections
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Deque, Dict, List, Mapping, Optional, Set, Tuple, Union

import msgpack

from .errors import SluiceError, Unavailable
from .wire import DEFAULT_COST, MalformedReply, decode_reply_map, error_of, reply_map

WORKER_HEADER = "Sluice-Worker"
MAX_ITEMS = 256
MAX_IN_FLIGHT = 2

Destination = Tuple[str, Union[str, int]]
"""``("w", worker_id)`` or ``("p", partition)``."""

ASK_ALONE = object()
"""An item's outcome: ask it again alone, through the server's mapping."""


def subject_of(destination: Destination) -> str:
    kind, name = destination
    return "rl.{}.{}.batch".format(kind, name)


@dataclass
class Waiter:
    token: str
    policy: str
    cost: int
    id: Optional[str]
    partition: int
    future: "asyncio.Future[Any]"


@dataclass
class _Lane:
    turns: int = 0
    queue: Deque[Waiter] = field(default_factory=collections.deque)

    def take_batch(self) -> List[Waiter]:
        batch: List[Waiter] = []
        while self.queue and len(batch) < MAX_ITEMS:
            w = self.queue.popleft()
            if not w.future.done():  # a caller that gave up is skipped
                batch.append(w)
        return batch


def encode_items(waiters: List[Waiter]) -> bytes:
    """The batch body: ``{"items": [{key, policy, cost, id?}, ...]}``."""
    items = []
    for w in waiters:
        item: Dict[str, Any] = {"key": w.token, "policy": w.policy}
        if w.cost != DEFAULT_COST:
            item["cost"] = w.cost
        if w.id is not None:
            item["id"] = w.id
        items.append(item)
    return msgpack.packb({"items": items})


def decode_batch(
    data: bytes, headers: Optional[Mapping[str, str]], n: int
) -> Union[Tuple[Optional[str], List[Any]], SluiceError]:
    """A batch reply: the worker that answered and one outcome per item (a
    :class:`Decision`, a :class:`SluiceError`, or :data:`ASK_ALONE` for a
    503 in its slot); a 503 for the whole batch is returned, to be retried.
    Raises :class:`MalformedReply`."""
    worker = (headers or {}).get(WORKER_HEADER)
    body = reply_map(data)
    refused = error_of(body, headers)
    if refused is not None:
        if isinstance(refused, Unavailable):
            return refused
        return worker, [refused] * n
    results = body.get("results")
    if not isinstance(results, list) or len(results) != n:
        raise MalformedReply("the batch reply has no list of {} results: {!r}".format(n, results))
    outcomes: List[Any] = []
    for r in results:
        if not isinstance(r, dict):
            raise MalformedReply("a batch result is not a map: {!r}".format(r))
        outcome = decode_reply_map(r, None)
        outcomes.append(ASK_ALONE if isinstance(outcome, Unavailable) else outcome)
    return worker, outcomes


# Sends a batch: (subject, body, partition or None, decode) -> decoded, or
# raises the client's "no answer" with its kind.
RoundTrip = Callable[[str, bytes, Optional[int], Callable[..., Any]], Awaitable[Any]]


class Batcher:
    """The destinations' turns and queues, and what replies taught about owners."""

    def __init__(self, partitions: int, round_trip: RoundTrip, no_answer: type) -> None:
        self.owners: List[Optional[str]] = [None] * partitions
        self._lanes: Dict[Destination, _Lane] = {}
        self._round_trip = round_trip
        self._no_answer = no_answer
        self._tasks: Set["asyncio.Task[None]"] = set()
        self.batches = 0
        """Batch requests sent."""
        self.batched_asks = 0
        """Asks sent in them."""

    def destination(self, partition: int) -> Destination:
        owner = self.owners[partition]
        return ("w", owner) if owner is not None else ("p", partition)

    async def ask(self, waiter: Waiter, deadline: float) -> Any:
        """The outcome of ``waiter``'s ask: a decision, an error, the
        client's "no answer", or :data:`ASK_ALONE`."""
        destination = self.destination(waiter.partition)
        lane = self._lanes.setdefault(destination, _Lane())
        if lane.turns >= MAX_IN_FLIGHT:
            lane.queue.append(waiter)
        elif lane.turns == 0:
            lane.turns += 1
            await self._send_turn(destination, [waiter])
        else:
            lane.turns += 1
            lane.queue.append(waiter)
            try:
                # The asks of this tick (the callers the last reply woke)
                # queue behind this one.
                await asyncio.sleep(0)
            except asyncio.CancelledError:
                self._hand_on(destination)
                raise
            await self._send_turn(destination, lane.take_batch())
        loop = asyncio.get_running_loop()
        try:
            return await asyncio.wait_for(waiter.future, max(deadline - loop.time(), 0))
        except asyncio.TimeoutError:
            return self._no_answer("timed out", "timeout")

    async def _send_turn(self, destination: Destination, waiters: List[Waiter]) -> None:
        try:
            if waiters:
                await self._send_batch(destination, waiters)
        except asyncio.CancelledError:
            # The caller sending gave up: its neighbours ask alone.
            for w in waiters:
                if not w.future.done():
                    w.future.set_result(ASK_ALONE)
            raise
        finally:
            self._hand_on(destination)

    def _hand_on(self, destination: Destination) -> None:
        lane = self._lanes.get(destination)
        if lane is None:
            return
        batch = lane.take_batch()
        if batch:
            task = asyncio.get_running_loop().create_task(self._send_turn_again(destination, batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            return
        lane.turns -= 1
        if lane.turns <= 0:
            del self._lanes[destination]

    async def _send_turn_again(self, destination: Destination, waiters: List[Waiter]) -> None:
        # The turn is still held: send, then hand it on again.
        try:
            await self._send_batch(destination, waiters)
        finally:
            self._hand_on(destination)

    async def _send_batch(self, destination: Destination, waiters: List[Waiter]) -> None:
        n = len(waiters)
        self.batches += 1
        self.batched_asks += n
        partition = destination[1] if destination[0] == "p" else None
        try:
            worker, outcomes = await self._round_trip(
                subject_of(destination),
                encode_items(waiters),
                partition if isinstance(partition, int) else None,
                lambda data, headers: decode_batch(data, headers, n),
            )
        except self._no_answer as why:
            if why.kind == "no_responders" and destination[0] == "w":
                self._forget_worker(str(destination[1]))
            alone = why.kind == "malformed" or (why.kind == "no_responders" and destination[0] == "w")
            for w in waiters:
                if not w.future.done():
                    w.future.set_result(ASK_ALONE if alone else why)
            return
        self._learn(destination, worker, waiters, outcomes)
        for w, outcome in zip(waiters, outcomes):
            if not w.future.done():
                w.future.set_result(outcome)

    def _learn(
        self, destination: Destination, worker: Optional[str], waiters: List[Waiter], outcomes: List[Any]
    ) -> None:
        for w, outcome in zip(waiters, outcomes):
            owner = self.owners[w.partition]
            if outcome is ASK_ALONE:
                thought = destination[1] if destination[0] == "w" else worker
                if owner is not None and owner == thought:
                    self.owners[w.partition] = None
            elif worker is not None:
                self.owners[w.partition] = worker

    def _forget_worker(self, gone: str) -> None:
        self.owners = [None if o == gone else o for o in self.owners]


__all__ = ["Batcher", "Waiter", "ASK_ALONE", "WORKER_HEADER", "encode_items", "decode_batch"]
