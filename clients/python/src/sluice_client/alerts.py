"""Threshold alerts (SPEC §14): read and followed from the JetStream
stream ``SLUICE_ALERTS``, which keeps each alert once.

Reading the stream (rather than subscribing to ``rl.alert.>``) gives every
alert exactly once, those stored before the reader started included: an
ephemeral pull consumer, filtered to one policy or to all, delivers them
oldest first, then (``follow=True``) each new one as it is stored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, AsyncIterator, Mapping, Optional

import nats.errors
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from .errors import Unavailable
from .wire import MalformedReply, check_policy

ALERT_STREAM = "SLUICE_ALERTS"

# How many alerts one fetch asks for, and how long a follower's fetch waits
# for the next one before asking again.
_BATCH = 256
_FOLLOW_WAIT = 5.0


@dataclass(frozen=True)
class Alert:
    """One alert: the first time ``key``'s count under ``policy`` in the
    window ``[window_start_ms, window_end_ms)`` reached ``threshold_pct``
    percent of a limit of ``max`` per ``per`` (``used`` counted then, at
    ``at_ms``). ``key`` is the key token (percent-encoded)."""

    key: str
    policy: str
    threshold_pct: int
    max: int
    per: str
    used: int
    window_start_ms: int
    window_end_ms: int
    at_ms: int


def decode_alert(data: bytes) -> Alert:
    """An alert's JSON body; :class:`MalformedReply` when it is none."""
    try:
        m: Mapping[str, Any] = json.loads(data)
        return Alert(
            key=str(m["key"]),
            policy=str(m["policy"]),
            threshold_pct=int(m["threshold_pct"]),
            max=int(m["max"]),
            per=str(m["per"]),
            used=int(m["used"]),
            window_start_ms=int(m["window_start_ms"]),
            window_end_ms=int(m["window_end_ms"]),
            at_ms=int(m["at_ms"]),
        )
    except (ValueError, KeyError, TypeError) as e:
        raise MalformedReply("not an alert: {}".format(e)) from None


def alert_filter(policy: Optional[str]) -> str:
    """``rl.alert.<policy>.*``, or ``rl.alert.>`` for every policy."""
    if policy is None:
        return "rl.alert.>"
    return "rl.alert.{}.*".format(check_policy(policy))


async def read_alerts(
    nc: Any, policy: Optional[str] = None, *, new_only: bool = False, follow: bool = False
) -> AsyncIterator[Alert]:
    """The stored alerts of ``policy`` (every policy when ``None``), oldest
    first (``new_only``: only those stored from now on); without
    ``follow`` it ends at the last one stored when it began, with it it
    goes on with each new one."""
    subject = alert_filter(policy)
    js = nc.jetstream()
    config = ConsumerConfig(
        deliver_policy=DeliverPolicy.NEW if new_only else DeliverPolicy.ALL,
        ack_policy=AckPolicy.NONE,
        filter_subject=subject,
        inactive_threshold=60.0,
        mem_storage=True,
    )
    try:
        sub = await js.pull_subscribe(subject, stream=ALERT_STREAM, config=config)
        pending = (await sub.consumer_info()).num_pending
    except nats.errors.Error as e:
        raise Unavailable(
            "cannot read the stream {} ({}); a worker creates it when it starts".format(ALERT_STREAM, e)
        ) from None
    try:
        while follow or pending > 0:
            want = _BATCH if follow else min(pending, _BATCH)
            try:
                msgs = await sub.fetch(want, timeout=_FOLLOW_WAIT)
            except nats.errors.TimeoutError:
                if follow:
                    continue
                raise Unavailable("the stream {} stopped answering".format(ALERT_STREAM)) from None
            for msg in msgs:
                pending -= 1
                yield decode_alert(msg.data)
    finally:
        try:
            await sub.unsubscribe()
        except nats.errors.Error:
            pass
