//! The defaults of the config's values and the bounds they are checked
//! against, apart from the checks so that the tables below
//! [`crate::config`] can name them without going through it.

use std::time::Duration;

/// Default number of partitions (SPEC §3).
pub const DEFAULT_PARTITIONS: u32 = 64;
/// The largest accepted partition count.
pub const MAX_PARTITIONS: u32 = 1024;
/// Default time between two snapshots of a partition's counters.
pub const DEFAULT_SNAPSHOT_INTERVAL: Duration = Duration::from_secs(2);
/// The shortest accepted snapshot interval: every owned partition is written
/// to JetStream KV once per interval, so shorter ones mostly add load.
pub const MIN_SNAPSHOT_INTERVAL: Duration = Duration::from_millis(100);
/// Default lifetime of a partition lease that is not renewed.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(3);
/// The shortest accepted lease lifetime (JetStream's TTL granularity).
pub const MIN_LEASE_TTL: Duration = Duration::from_secs(1);
/// The longest accepted lease lifetime: a dead worker's partitions stay
/// unanswered for up to this long.
pub const MAX_LEASE_TTL: Duration = Duration::from_secs(60);
/// Default bound on the live counters one worker holds: 1M active keys fit
/// twice over (~100-110 bytes of RSS each under a 10/min + 500/h sliding
/// window, so ~220 MB at the bound; docs/CONFIG.md, `max_keys`).
pub const DEFAULT_MAX_KEYS: u64 = 2_000_000;
/// The longest accepted policy name (the wire protocol's rule: a policy
/// that can be configured can always be asked for).
pub const MAX_POLICY_NAME_LEN: usize = crate::wire::MAX_POLICY_NAME;
