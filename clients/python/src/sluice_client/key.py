"""Key encoding (SPEC §1, docs/PROTOCOL.md §1).

A key is any bytes (a ``str`` is taken as its UTF-8 bytes). It travels as
the last token of ``rl.allow.<key>``: bytes in ``[A-Za-z0-9_-]`` as they
are, every other byte as ``%`` and two upper-case hex digits. Workers accept
only this canonical spelling, because nats-server picks the partition by
hashing the token's raw bytes: two spellings of one key would be counted
apart.
"""

from __future__ import annotations

from typing import Union

from .errors import BadRequest

MAX_TOKEN_LEN = 256
"""The most bytes a key token may have, after encoding."""

_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
# One entry per byte value: the byte itself or its escape.
_ENCODED = tuple(chr(b) if b in _UNRESERVED else "%{:02X}".format(b) for b in range(256))

Key = Union[str, bytes, bytearray, memoryview]


def encode_key(key: Key) -> str:
    """The canonical key token of ``key``, e.g. ``bob@x.io`` → ``bob%40x%2Eio``.

    Raises :class:`BadRequest` for an empty key or one longer than 256 bytes
    once encoded (a byte outside ``[A-Za-z0-9_-]`` costs 3).
    """
    if isinstance(key, str):
        raw = key.encode("utf-8")
    elif isinstance(key, (bytes, bytearray, memoryview)):
        raw = bytes(key)
    else:
        raise TypeError("a key is str or bytes, not {}".format(type(key).__name__))
    if not raw:
        raise BadRequest("the key is empty; a key token is 1 to {} bytes".format(MAX_TOKEN_LEN))
    token = "".join([_ENCODED[b] for b in raw])
    if len(token) > MAX_TOKEN_LEN:
        raise BadRequest(
            "the key token is {} bytes; the limit is {} bytes after percent-encoding "
            "(each byte outside A-Z, a-z, 0-9, '_' and '-' takes 3)".format(len(token), MAX_TOKEN_LEN)
        )
    return token
