"""Request and reply bodies (docs/PROTOCOL.md §2–§4), in MessagePack.

Requests: an empty body for the defaults (policy ``default``, cost 1), else
a map with only the fields that differ. Replies: a decision map or an error
map ``{error, message}``; unknown fields are ignored, since the contract
grows only by adding fields.
"""

from __future__ import annotations

import json
import re
from typing import Any, Dict, Mapping, Optional, Union

import msgpack

from .decision import Decision, Level, Source
from .errors import BadRequest, SluiceError, error_from_reply

DEFAULT_POLICY = "default"
DEFAULT_COST = 1
MAX_COST = 1_000_000_000
MAX_POLICY_NAME = 64

_POLICY_NAME = re.compile(r"[A-Za-z0-9_-]{1,%d}\Z" % MAX_POLICY_NAME)

ERROR_CODE_HEADER = "Nats-Service-Error-Code"
# On a 503: the owner did it in memory but could not store it (journal
# mode); a hold verb so answered must not be sent again.
UNSTORED_HEADER = "Sluice-Unstored"


def check_policy(policy: Optional[str]) -> str:
    """The policy name to send (``default`` for ``None``); raises
    :class:`BadRequest` for a name no worker accepts."""
    if policy is None:
        return DEFAULT_POLICY
    if not isinstance(policy, str) or not _POLICY_NAME.match(policy):
        raise BadRequest(
            "the policy name {!r} is not valid; policy names are 1 to {} characters "
            "of A-Z, a-z, 0-9, '_' and '-'".format(policy, MAX_POLICY_NAME)
        )
    return policy


def check_cost(cost: int) -> int:
    """Raises :class:`BadRequest` for a cost no worker accepts."""
    if isinstance(cost, bool) or not isinstance(cost, int):
        raise BadRequest("the cost must be an unsigned integer, not {!r}".format(cost))
    if cost < 0:
        raise BadRequest(
            "the cost must not be negative (got {}); use 0 to look without consuming".format(cost)
        )
    if cost > MAX_COST:
        raise BadRequest("cost {} is absurd; no request may cost more than {}".format(cost, MAX_COST))
    return cost


MAX_ID_LEN = 128
"""The longest ask id, in bytes (SPEC §16)."""


def check_id(id: str) -> str:
    """An ask's id as the workers take it: 1 to 128 bytes of printable
    ASCII (space to ``~``). Raises :class:`BadRequest` otherwise."""
    if not isinstance(id, str) or not 1 <= len(id) <= MAX_ID_LEN or not all(" " <= c <= "~" for c in id):
        raise BadRequest(
            "an ask's id must be 1 to {} bytes of printable ASCII (space to '~'), not {!r}; "
            "send a request id or a UUID".format(MAX_ID_LEN, id)
        )
    return id


def request_body(policy: str, cost: int, id: Optional[str] = None, wait_ms: int = 0) -> bytes:
    """Empty for the defaults (the cheapest request), else a MessagePack map
    with what differs, ``policy`` first, then ``cost``, ``id`` and
    ``wait_ms`` (SPEC §18; 0 sends none)."""
    fields: Dict[str, Any] = {}
    if policy != DEFAULT_POLICY:
        fields["policy"] = policy
    if cost != DEFAULT_COST:
        fields["cost"] = cost
    if id is not None:
        fields["id"] = id
    if wait_ms > 0:
        fields["wait_ms"] = wait_ms
    return msgpack.packb(fields) if fields else b""


def wait_ms_of(wait: Optional[float]) -> int:
    """A wait in seconds as the wire's ``wait_ms``: whole milliseconds
    rounded down (so that a policy's exact ``max_wait`` is never over it);
    ``None`` is no wait. Raises :class:`BadRequest` for a negative one."""
    if wait is None:
        return 0
    if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not wait >= 0:
        raise BadRequest(
            "the wait must be a number of seconds, 0 or more (e.g. 0.25), not {!r}".format(wait)
        )
    return int(wait * 1000)


class MalformedReply(Exception):
    """A reply that is neither a decision nor an error map."""


def _uint(body: Mapping[str, Any], field: str) -> int:
    value = body.get(field)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise MalformedReply("the reply's {!r} is not an unsigned integer: {!r}".format(field, value))
    return value


def reply_map(data: bytes) -> Mapping[str, Any]:
    """A reply's map: a JSON object when it starts with ``{`` (the reply to
    a JSON request, docs/PROTOCOL.md §2), else MessagePack; raises
    :class:`MalformedReply`."""
    if data[:1] == b"{":
        try:
            body = json.loads(data)
        except ValueError as e:
            raise MalformedReply("the reply is not JSON: {}".format(e)) from None
    else:
        try:
            body = msgpack.unpackb(data, raw=False)
        except Exception as e:  # msgpack raises several types
            raise MalformedReply("the reply is not MessagePack: {}".format(e)) from None
    if not isinstance(body, dict):
        raise MalformedReply("the reply is not a map: {!r}".format(body))
    return body


def error_of(body: Mapping[str, Any], headers: Optional[Mapping[str, str]]) -> Optional[SluiceError]:
    """The typed error an error reply (a map with ``error``) carries, else None."""
    if "error" not in body:
        return None
    status = None
    raw_status = (headers or {}).get(ERROR_CODE_HEADER)
    if raw_status is not None and raw_status.isdigit():
        status = int(raw_status)
    code = body.get("error")
    message = body.get("message")
    return error_from_reply(
        code if isinstance(code, str) else None,
        status,
        message if isinstance(message, str) else "the worker refused the request ({})".format(code),
    )


def decode_reply(
    data: bytes, headers: Optional[Mapping[str, str]] = None
) -> Union[Decision, SluiceError]:
    """A worker's reply: a :class:`Decision`, or the typed error it
    carries (returned, not raised). Raises :class:`MalformedReply`."""
    return decode_reply_map(reply_map(data), headers)


def decode_reply_map(
    body: Mapping[str, Any], headers: Optional[Mapping[str, str]] = None
) -> Union[Decision, SluiceError]:
    """:func:`decode_reply` of a map already decoded (a batch's result)."""
    error = error_of(body, headers)
    if error is not None:
        return error
    allowed = body.get("allowed")
    policy = body.get("policy")
    if not isinstance(allowed, bool):
        raise MalformedReply("the reply's 'allowed' is not a bool: {!r}".format(allowed))
    if not isinstance(policy, str):
        raise MalformedReply("the reply's 'policy' is not a string: {!r}".format(policy))
    shadow_denied = body.get("shadow_denied", False)
    if not isinstance(shadow_denied, bool):
        raise MalformedReply("the reply's 'shadow_denied' is not a bool: {!r}".format(shadow_denied))
    repeat = body.get("repeat", False)
    if not isinstance(repeat, bool):
        raise MalformedReply("the reply's 'repeat' is not a bool: {!r}".format(repeat))
    blocked = body.get("blocked", False)
    if not isinstance(blocked, bool):
        raise MalformedReply("the reply's 'blocked' is not a bool: {!r}".format(blocked))
    return Decision(
        allowed=allowed,
        limit=_uint(body, "limit"),
        remaining=_uint(body, "remaining"),
        reset_ms=_uint(body, "reset_ms"),
        retry_after_ms=_uint(body, "retry_after_ms"),
        policy=policy,
        source=Source.WORKER,
        shadow_denied=shadow_denied,
        repeat=repeat,
        wait_ms=_uint(body, "wait_ms") if "wait_ms" in body else 0,
        levels=_levels(body),
        denied_by=_denied_by(body),
        blocked=blocked,
    )


def _levels(body: Mapping[str, Any]) -> "tuple[Level, ...]":
    """A grouped reply's ``levels`` (SPEC §17), outermost first."""
    levels = body.get("levels", [])
    if not isinstance(levels, list):
        raise MalformedReply("the reply's 'levels' is not a list: {!r}".format(levels))
    out = []
    for level in levels:
        if not isinstance(level, dict) or not isinstance(level.get("policy"), str):
            raise MalformedReply("a level of the reply is not {{policy, remaining, reset_ms}}: {!r}".format(level))
        out.append(Level(level["policy"], _uint(level, "remaining"), _uint(level, "reset_ms")))
    return tuple(out)


def _denied_by(body: Mapping[str, Any]) -> Optional[str]:
    denied_by = body.get("denied_by")
    if denied_by is not None and not isinstance(denied_by, str):
        raise MalformedReply("the reply's 'denied_by' is not a string: {!r}".format(denied_by))
    return denied_by
