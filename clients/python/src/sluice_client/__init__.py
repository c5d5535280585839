"""sluice-client: an asyncio client for sluice, the distributed rate limiter
on NATS.

- :class:`SluiceClient` (``client.py``): ``allow``, ``peek``, ``hit``,
  ``hit_and_peek``; the deny cache (``deny_cache.py``), batching of
  concurrent asks (``batch.py``, its partition check ``probe.py``),
  retries and the ``open``/``closed``/``local`` fallback (``local.py``, its
  algorithms ``algorithms.py``); ``usage``
  and ``top`` (SPEC §9); ``reserve``, ``settle``, ``extend`` and
  ``async with client.hold(...)`` (SPEC §13).
- :class:`Alert` (``alerts.py``): threshold alerts (SPEC §14), read
  and followed with ``client.alerts(policy, follow=True)``.
- :class:`Held`, :class:`Hold`, :class:`HoldDenied` (``holds.py``): holds.
- :class:`Usage`, :class:`Top` (``usage.py``): usage history replies.
- :class:`Decision`, :class:`Level`, :class:`Source` (``decision.py``): the
  typed answer (a grouped ask's ``levels`` and ``denied_by``) and the
  headers an HTTP server should return.
- :class:`SluiceError` and its kinds (``errors.py``).
- :func:`encode_key` (``key.py``: a key, or a grouped key's tuple of
  tokens, ``("acme", "alice")``), the partition hash (``partition.py``)
  and the bodies (``wire.py``).

::

    client = await SluiceClient.connect("nats://127.0.0.1:4222")
    d = await client.allow("bob@x.io")
    if not d.allowed:
        print("retry in", d.retry_after, "s", d.headers())
"""

from .alerts import Alert
from .client import Fallback, SluiceClient, Stats
from .decision import Decision, Level, Source
from .errors import BadRequest, IdReused, SluiceError, TooLarge, Unavailable, UnknownHold, UnknownPolicy
from .holds import Hold, HoldDenied, Held, HoldScope
from .key import MAX_TOKEN_LEN, MAX_TOKENS, encode_key
from .local import policies_from_config
from .usage import Top, TopEntry, Usage, UsagePart, UsagePoint

__all__ = [
    "SluiceClient",
    "Alert",
    "Fallback",
    "Stats",
    "policies_from_config",
    "Decision",
    "Level",
    "Source",
    "SluiceError",
    "BadRequest",
    "UnknownPolicy",
    "TooLarge",
    "Unavailable",
    "UnknownHold",
    "IdReused",
    "Held",
    "Hold",
    "HoldScope",
    "HoldDenied",
    "encode_key",
    "MAX_TOKEN_LEN",
    "MAX_TOKENS",
    "Usage",
    "UsagePoint",
    "UsagePart",
    "Top",
    "TopEntry",
]

__version__ = "0.2.0"
