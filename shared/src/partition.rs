//! The key → partition function, computed exactly as nats-server does.
//!
//! The server config maps `rl.allow.*` to
//! `rl.p.{{partition(N,1)}}.allow.{{wildcard(1)}}`. For `{{partition(N,1)}}`
//! nats-server (`server/subject_transform.go`, `getHashPartition`) takes the
//! 32-bit FNV-1a hash of the first wildcard token's raw bytes, mod N. The
//! token it hashes is the *encoded* key token (`bob%40x%2Eio`, not
//! `bob@x.io`), which is one reason keys have one canonical spelling (see
//! [`crate::key`]).
//!
//! Nothing on the normal request path needs this: the server routes. It is
//! here for code that must agree with the server without asking it: a
//! worker checking that a key it was sent belongs to a partition it owns
//! (batches bypass the mapping), the batching client grouping keys by
//! partition, `sluice status`, and tests. It must match the server bit for
//! bit, so the tests pin values checked against nats-server 2.15.1.

/// 32-bit FNV-1a, as Go's `hash/fnv` `New32a`.
pub const fn fnv1a32(bytes: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    let mut i = 0;
    while i < bytes.len() {
        h ^= bytes[i] as u32;
        h = h.wrapping_mul(0x0100_0193);
        i += 1;
    }
    h
}

/// The partition nats-server's `{{partition(partitions,1)}}` maps `token`
/// to. Like the server, 0 partitions means partition 0. A grouped key
/// (`acme.eng.alice`, SPEC §17) is hashed by its first token alone, as the
/// mapping of `rl.allow.*.*` and `rl.allow.*.*.*` does.
pub const fn partition_of(token: &str, partitions: u32) -> u32 {
    if partitions == 0 {
        return 0;
    }
    fnv1a32(hashed_part(token)) % partitions
}

/// The bytes of `token` its partition is hashed from: a grouped key's
/// first token, a plain key's whole token.
pub const fn hashed_part(token: &str) -> &[u8] {
    let bytes = token.as_bytes();
    let mut end = 0;
    while end < bytes.len() && bytes[end] != b'.' {
        end += 1;
    }
    bytes.split_at(end).0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checked against nats-server 2.15.1 (docs/PROTOCOL.md, "Partitions").
    #[test]
    fn matches_the_nats_server_table_for_16_partitions() {
        let table: [(&str, u32, u32); 5] = [
            ("alice", 0x8722_13e7, 7),
            ("bob", 0x86c6_a0d4, 4),
            ("carol", 0x6708_8f12, 2),
            ("user-42", 0x0260_73ab, 11),
            ("0123456789abcdef", 0x87bc_333d, 13),
        ];
        for (token, hash, partition) in table {
            assert_eq!(fnv1a32(token.as_bytes()), hash, "fnv1a32({token:?})");
            assert_eq!(partition_of(token, 16), partition, "partition of {token:?}");
        }
    }

    #[test]
    fn a_grouped_key_lives_in_its_first_tokens_partition() {
        assert_eq!(partition_of("user-42.alice", 16), 11);
        assert_eq!(partition_of("user-42.eng.alice", 16), 11);
        assert_eq!(partition_of("user-42", 16), 11);
    }

    #[test]
    fn fnv1a32_of_nothing_is_the_offset_basis() {
        assert_eq!(fnv1a32(b""), 0x811c_9dc5);
    }

    #[test]
    fn zero_partitions_is_partition_zero_like_the_server() {
        assert_eq!(partition_of("alice", 0), 0);
        assert_eq!(partition_of("alice", 1), 0);
    }
}
