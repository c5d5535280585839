"""Key encoding (SPEC §1, docs/PROTOCOL.md §1).

A key is any bytes (a ``str`` is taken as its UTF-8 bytes). It travels as
the last token of ``rl.allow.<key>``: bytes in ``[A-Za-z0-9_-]`` as they
are, every other byte as ``%`` and two upper-case hex digits. Workers accept
only this canonical spelling, because nats-server picks the partition by
hashing the token's raw bytes: two spellings of one key would be counted
apart.

A grouped key (SPEC §17, docs/GROUPS.md) is a tuple or list of one to
three such keys, outermost first: ``("acme", "eng", "alice")`` travels as
``rl.allow.acme.eng.alice``, each token encoded as above and joined by
``.``, so that the worker decides every level of the policy's chain at
once. A ``.`` or ``/`` inside a ``str`` key stays part of that one key
(``%2E``, ``%2F``): only a tuple or list makes tokens.
"""

from __future__ import annotations

from typing import List, Tuple, Union

from .errors import BadRequest

MAX_TOKEN_LEN = 256
"""The most bytes a key token may have, after encoding."""

_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
# One entry per byte value: the byte itself or its escape.
_ENCODED = tuple(chr(b) if b in _UNRESERVED else "%{:02X}".format(b) for b in range(256))

MAX_TOKENS = 3
"""The most tokens a grouped key has: organisation, team, key."""

Token = Union[str, bytes, bytearray, memoryview]
"""One token's bytes (a ``str`` as its UTF-8)."""

Key = Union[Token, Tuple[Token, ...], List[Token]]
"""A key: one token's bytes, or a grouped key's tokens, outermost first."""


def encode_key(key: Key) -> str:
    """The canonical key token of ``key``, e.g. ``bob@x.io`` → ``bob%40x%2Eio``;
    of a tuple or list, its tokens' joined by ``.``: ``("acme", "alice")``
    → ``acme.alice``.

    Raises :class:`BadRequest` for an empty key or one longer than 256 bytes
    once encoded (a byte outside ``[A-Za-z0-9_-]`` costs 3), and for a
    grouped key of no token, more than three, or an empty one.
    """
    if isinstance(key, (tuple, list)):
        return _encode_path(key)
    return _encode_token(key)


def _encode_path(tokens: "Union[Tuple[Token, ...], List[Token]]") -> str:
    if not tokens:
        raise BadRequest("the key is empty; a grouped key is 1 to {} tokens".format(MAX_TOKENS))
    if len(tokens) > MAX_TOKENS:
        raise BadRequest(
            "the key has {} tokens; a grouped key has at most {} (org, team, key)".format(
                len(tokens), MAX_TOKENS
            )
        )
    for token in tokens:
        if isinstance(token, (tuple, list)):
            raise TypeError("a grouped key's token is str or bytes, not {}".format(type(token).__name__))
    return ".".join(_encode_token(t) for t in tokens)


def _encode_token(key: Token) -> str:
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
