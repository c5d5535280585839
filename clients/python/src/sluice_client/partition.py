"""The key → partition function nats-server computes (docs/PROTOCOL.md
§6): FNV-1a 32 of the key *token*'s bytes, mod the partition count. The
client needs it to group asks into batches by owner and to tell which
partitions are down; docs/conformance/partitions.json pins it.
"""

from __future__ import annotations


def fnv1a32(data: bytes) -> int:
    """FNV-1a, 32 bits: nats-server's partition hash (docs/PROTOCOL.md §6)."""
    h = 0x811C9DC5
    for b in data:
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def partition_of(token: str, partitions: int) -> int:
    """The partition nats-server maps a key token to: a grouped key's
    (``acme.alice``, SPEC §17) is its first token's, where every key of
    its group lives."""
    first = token.split(".", 1)[0]
    return fnv1a32(first.encode("ascii")) % partitions if partitions else 0
