"""Errors: a request that got no decision, typed by the SPEC §1 codes.

A denial is not an error: it is a :class:`~sluice_client.Decision` with
``allowed == False``. An error means there is no decision: the request can
never pass as sent (400, 404, 413), or nobody could decide and the fallback
is ``closed`` (503).
"""

from __future__ import annotations

from typing import Dict, Optional, Type


class SluiceError(Exception):
    """A request that got no decision.

    ``message`` is the worker's sentence when a worker refused the request,
    or the client's own (same style) when the client refused it before
    sending or when no worker answered and the fallback is ``closed``.
    """

    status: int = 0
    """400, 404, 413 or 503 (the gateway's HTTP status for the same error)."""

    code: str = ""
    """The error word of the reply body: ``bad_request``, ``unknown_policy``, ..."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BadRequest(SluiceError):
    """400: a malformed key, policy name or cost, or a cost the policy can
    never allow."""

    status = 400
    code = "bad_request"


class UnknownPolicy(SluiceError):
    """404: the policy name is valid but not configured."""

    status = 404
    code = "unknown_policy"


class TooLarge(SluiceError):
    """413: the request body is too large."""

    status = 413
    code = "too_large"


class Unavailable(SluiceError):
    """503: no worker answered and the fallback is ``closed``, or the worker
    could not decide right now."""

    status = 503
    code = "unavailable"


class UnknownHold(SluiceError):
    """404: no live hold of that name under the key and policy (settled,
    ended, or never reserved there); nothing was changed."""

    status = 404
    code = "unknown_hold"


class IdReused(SluiceError):
    """409: the ask's id was first used by another ask of the key (another
    verb, policy or cost; SPEC §16); nothing was counted. Send a new id
    for a new ask."""

    status = 409
    code = "id_reused"


_BY_CODE: Dict[str, Type[SluiceError]] = {
    cls.code: cls for cls in (BadRequest, UnknownPolicy, TooLarge, Unavailable, UnknownHold, IdReused)
}
_BY_STATUS: Dict[int, Type[SluiceError]] = {
    cls.status: cls for cls in (BadRequest, UnknownPolicy, TooLarge, Unavailable, IdReused)
}


def error_from_reply(code: Optional[str], status: Optional[int], message: str) -> SluiceError:
    """The typed error for a worker's error reply: by the body's ``error``
    word, else by the ``Nats-Service-Error-Code`` header."""
    cls = _BY_CODE.get(code or "") or _BY_STATUS.get(status or 0)
    if cls is not None:
        return cls(message)
    err = SluiceError(message)
    err.status = status or 0
    err.code = code or ""
    return err
