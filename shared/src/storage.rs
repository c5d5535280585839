//! The names of everything sluice keeps in JetStream: buckets, their keys,
//! streams and their subjects.
//!
//! Why here and not in the worker that writes them: the CLI (`sluice
//! status`, `sluice policy`), the gateway and the tests read the same
//! buckets, and a name spelled twice is a bucket one side never finds. The
//! worker's `store` module creates and opens these; docs/ARCHITECTURE.md
//! says what each holds.

/// KV bucket of partition leases (`p.<n>`) and worker heartbeats (`w.<id>`).
pub const LEASE_BUCKET: &str = "sluice-leases";
/// KV bucket of partition snapshots: a manifest `p.<n>` and its chunks.
pub const SNAPSHOT_BUCKET: &str = "sluice-snapshots";
/// KV bucket of live policies and per-key overrides (SPEC §7).
pub const POLICY_BUCKET: &str = "sluice-policies";
/// Values [`POLICY_BUCKET`] keeps per key (the most a KV bucket keeps): a
/// reader that starts after an invalid value goes back through them to the
/// newest valid one, which every running reader still has in force. So up
/// to 63 invalid values in a row after a valid one are survived.
pub const POLICY_HISTORY: i64 = 64;
/// Stream of counted requests (`durability = "journal"`).
pub const JOURNAL_STREAM: &str = "SLUICE_JOURNAL";
/// Every subject of [`JOURNAL_STREAM`].
pub const JOURNAL_SUBJECTS: &str = "sluice.journal.>";

/// Stream of threshold alerts (SPEC §14), on the subjects
/// `rl.alert.<policy>.<key>` ([`crate::subject::alert_subject`]).
pub const ALERT_STREAM: &str = "SLUICE_ALERTS";
/// How long [`ALERT_STREAM`] remembers an alert's message id, so that one
/// published again (a retry, a new owner after a handover or a crash) is
/// stored once: longer than any owner takes to hand its alerts on
/// (docs/USAGE.md, "Alerts"); never longer than the retention.
pub const ALERT_DUPLICATE_WINDOW: std::time::Duration = std::time::Duration::from_secs(10 * 60);

const PARTITION_KEY: &str = "p.";
const WORKER_KEY: &str = "w.";
const OVERRIDE_KEY: &str = "override.";

/// The stream JetStream keeps a KV bucket in.
pub fn bucket_stream(bucket: &str) -> String {
    format!("KV_{bucket}")
}

/// Lease key of a partition in [`LEASE_BUCKET`]; the same key names the
/// partition's snapshot manifest in [`SNAPSHOT_BUCKET`].
pub fn partition_key(partition: u32) -> String {
    format!("{PARTITION_KEY}{partition}")
}

/// Heartbeat key of a worker in [`LEASE_BUCKET`].
pub fn worker_key(worker: &str) -> String {
    format!("{WORKER_KEY}{worker}")
}

/// A key of [`LEASE_BUCKET`], parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseKey<'a> {
    /// `w.<id>`: a worker's heartbeat.
    Worker(&'a str),
    /// `p.<n>`: a partition's lease.
    Partition(u32),
}

impl<'a> LeaseKey<'a> {
    /// `None` for a key that is neither (nothing else is written there).
    pub fn parse(key: &'a str) -> Option<LeaseKey<'a>> {
        if let Some(id) = key.strip_prefix(WORKER_KEY) {
            return Some(LeaseKey::Worker(id));
        }
        key.strip_prefix(PARTITION_KEY)?
            .parse()
            .ok()
            .map(LeaseKey::Partition)
    }
}

/// Key of a snapshot chunk in [`SNAPSHOT_BUCKET`]: `p.<n>.g<gen>.c<i>`.
pub fn chunk_key(partition: u32, generation: &str, index: u32) -> String {
    format!("{PARTITION_KEY}{partition}.g{generation}.c{index}")
}

/// Every key of one snapshot generation of `partition`: `p.<n>.g<gen>.>`
/// (to purge it).
pub fn generation_keys(partition: u32, generation: &str) -> String {
    format!("{PARTITION_KEY}{partition}.g{generation}.>")
}

/// The stream subject JetStream stores KV `key` of `bucket` under.
pub fn kv_subject(bucket: &str, key: &str) -> String {
    format!("$KV.{bucket}.{key}")
}

/// The stream of one usage tier (SPEC §9), named by its step:
/// `SLUICE_USAGE_1m`.
pub fn usage_stream(step: &str) -> String {
    format!("SLUICE_USAGE_{step}")
}

/// Every subject of [`usage_stream`]: `sluice.usage.<step>.>`.
pub fn usage_subjects(step: &str) -> String {
    format!("sluice.usage.{step}.>")
}

/// What the subjects of one partition's records in one tier start with:
/// `sluice.usage.<step>.<partition>.`.
pub fn usage_partition_prefix(step: &str, partition: u32) -> String {
    format!("sluice.usage.{step}.{partition}.")
}

/// The subject of one partition's record of one bucket (its start in ms):
/// `sluice.usage.<step>.<partition>.<bucket-ms>`.
pub fn usage_subject(step: &str, partition: u32, bucket_ms: u64) -> String {
    format!("{}{bucket_ms}", usage_partition_prefix(step, partition))
}

/// The journal subject a worker appends to: `sluice.journal.w.<worker>`.
pub fn journal_subject(worker: &str) -> String {
    format!("sluice.journal.{WORKER_KEY}{worker}")
}

/// Key of a policy in [`POLICY_BUCKET`]: its name.
pub fn policy_key(policy: &str) -> String {
    policy.to_string()
}

/// Key of a per-key override in [`POLICY_BUCKET`]:
/// `override.<policy>.<key-token>`, with each `%` of the token written as
/// `=`, since KV keys cannot hold `%` (SPEC §7).
pub fn override_key(policy: &str, key_token: &str) -> String {
    format!("{OVERRIDE_KEY}{policy}.{}", key_token.replace('%', "="))
}

/// A key of [`POLICY_BUCKET`], parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PolicyKey {
    /// `<policy>`.
    Policy(String),
    /// `override.<policy>.<key-token>`, the token with its `%` restored.
    Override { policy: String, key_token: String },
}

impl PolicyKey {
    /// `None` for an override key without both parts.
    pub fn parse(key: &str) -> Option<PolicyKey> {
        match key.strip_prefix(OVERRIDE_KEY) {
            None => Some(PolicyKey::Policy(key.to_string())),
            Some(rest) => {
                let (policy, token) = rest.split_once('.')?;
                (!policy.is_empty() && !token.is_empty()).then(|| PolicyKey::Override {
                    policy: policy.to_string(),
                    key_token: token.replace('=', "%"),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_keys_round_trip() {
        assert_eq!(partition_key(7), "p.7");
        assert_eq!(worker_key("w1-ab"), "w.w1-ab");
        assert_eq!(LeaseKey::parse("p.7"), Some(LeaseKey::Partition(7)));
        assert_eq!(LeaseKey::parse("w.w1-ab"), Some(LeaseKey::Worker("w1-ab")));
        assert_eq!(LeaseKey::parse("p.x"), None);
        assert_eq!(LeaseKey::parse("q.1"), None);
    }

    #[test]
    fn snapshot_and_journal_names() {
        assert_eq!(chunk_key(3, "5x9", 0), "p.3.g5x9.c0");
        assert_eq!(
            kv_subject(SNAPSHOT_BUCKET, &chunk_key(3, "5x9", 0)),
            "$KV.sluice-snapshots.p.3.g5x9.c0"
        );
        assert_eq!(generation_keys(3, "5x9"), "p.3.g5x9.>");
        assert_eq!(bucket_stream(SNAPSHOT_BUCKET), "KV_sluice-snapshots");
        assert_eq!(journal_subject("w1"), "sluice.journal.w.w1");
        assert!(journal_subject("w1").starts_with(JOURNAL_SUBJECTS.trim_end_matches('>')));
    }

    #[test]
    fn override_keys_write_percent_as_equals_and_back() {
        let key = override_key("login", "bob%40x%2Eio");
        assert_eq!(key, "override.login.bob=40x=2Eio");
        assert_eq!(
            PolicyKey::parse(&key),
            Some(PolicyKey::Override {
                policy: "login".into(),
                key_token: "bob%40x%2Eio".into()
            })
        );
        assert_eq!(
            PolicyKey::parse("login"),
            Some(PolicyKey::Policy("login".into()))
        );
        assert_eq!(PolicyKey::parse("override.login"), None);
    }
}
