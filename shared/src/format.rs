//! The format versions of what workers store in JetStream: snapshots,
//! journal messages, lease values and usage records, each kind versioned on
//! its own.
//!
//! Why: during a rolling upgrade workers of two releases read each other's
//! state. A release that changes a format must be able to tell, and a worker
//! that meets a format newer than it knows must refuse it with a clear error
//! rather than misread it (a misread snapshot is a wrong count, a misread
//! lease a wrong owner). So every stored thing says its format:
//!
//! - a snapshot manifest has `"v"` (its chunks are in the manifest's format);
//! - a journal message has the header [`FORMAT_HEADER`];
//! - a lease or heartbeat value is `{"v":2,"worker":"<id>"}`.
//!
//! Format 1 is what releases before versioning wrote: no `"v"`, no header,
//! a lease value that is the bare worker id. A worker reads every format of
//! a kind up to that kind's newest ([`SNAPSHOT`], [`JOURNAL`], [`HOLDER`],
//! [`USAGE`]) and refuses anything newer ([`NewerFormat`]). Why one version
//! per kind: a change to one kind (journal records gaining fields) must not
//! make older workers refuse the others (a lease value they read fine).
//! docs/ARCHITECTURE.md, "Formats", says what each version holds.

use serde::{Deserialize, Serialize};

/// The newest snapshot manifest format this release reads, and the one it
/// writes for a snapshot that carries an ask's id whose first answer's
/// start is still to come (SPEC §18 waiting, `CarriedId::waits`), which a
/// release before it cannot decode.
pub const SNAPSHOT: u32 = 5;

/// The format of a snapshot whose chunks hold a blocked key's state (SPEC
/// §18, `KeyState::Blocked`), which a release before blocks cannot
/// decode, and no id waiting for its start.
pub const SNAPSHOT_BLOCKS: u32 = 4;

/// The format of a snapshot without blocked keys whose carried state is
/// too large for the manifest (many remembered ids or holds), which then
/// travels in the chunks after the counters: a release before it would
/// misread those chunks.
pub const SNAPSHOT_CARRIED_IN_CHUNKS: u32 = 3;

/// The format of a snapshot manifest that carries its kept state itself:
/// what this release writes while that state is small, so that workers of
/// the release before read it during a rolling upgrade.
pub const SNAPSHOT_CARRIED_INLINE: u32 = 2;

/// The newest journal message format this release reads, and the one it
/// writes for a message with an ask's id whose first answer's start is
/// still to come (SPEC §18 waiting), which a release before it cannot
/// decode.
pub const JOURNAL: u32 = 8;

/// The format of a journal message with an ask's id (SPEC §16) and none
/// waiting for its start, which a release before ids would replay as a
/// count of nothing and forget.
pub const JOURNAL_IDS: u32 = 7;

/// The format of a journal message of numbered turns without ids:
/// format 6 messages group their records by the turn that made them, so
/// that a takeover replays none that its snapshot holds. Format 3 messages
/// hold records with fields past a count's five (resets, denials, slices,
/// slices given back), format 4 ones records of holds too, format 5 ones
/// records whose usage is not what their kind says (global limits); each
/// was written only by a message that held such a record, so that a
/// worker of an earlier release read the others during a rolling upgrade
/// and refused only what it would misread.
pub const JOURNAL_TURNS: u32 = 6;

/// The format of a journal message with a record whose usage differs from
/// its kind (global limits) and no turn numbers.
pub const JOURNAL_USAGE: u32 = 5;

/// The format of a journal message with holds' records but no record
/// whose usage differs from its kind.
pub const JOURNAL_HOLDS: u32 = 4;

/// The format of a journal message with records past counts but no hold's.
pub const JOURNAL_SLICES: u32 = 3;

/// The format of a journal message whose records are all counts.
pub const JOURNAL_COUNTS: u32 = 2;

/// The newest lease and heartbeat value format this release reads, and the
/// one it writes.
pub const HOLDER: u32 = 2;

/// The newest usage record format this release reads, and the one it
/// writes.
pub const USAGE: u32 = 2;

/// The format of state written before formats were versioned.
pub const UNVERSIONED: u32 = 1;

/// The NATS header naming a journal message's format.
pub const FORMAT_HEADER: &str = "Sluice-Format";

/// State in a format newer than this release reads.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{what} is in format v{found}, newer than this sluice reads (v{reads}): it was written by a newer release; upgrade this worker (or finish the rolling upgrade) instead of letting it misread the state")]
pub struct NewerFormat {
    pub what: String,
    pub found: u64,
    /// The newest format of that kind this release reads.
    pub reads: u32,
}

/// Refuses `found` when it is newer than `newest`, the newest format of
/// that kind this release reads.
pub fn check(newest: u32, what: impl FnOnce() -> String, found: u64) -> Result<(), NewerFormat> {
    if found > u64::from(newest) {
        return Err(NewerFormat {
            what: what(),
            found,
            reads: newest,
        });
    }
    Ok(())
}

/// The format a journal message's [`FORMAT_HEADER`] names: [`UNVERSIONED`]
/// when absent; an unreadable value counts as newer than any (it was not
/// written by a release that knows this header's meaning).
pub fn of_header(value: Option<&str>) -> u64 {
    match value {
        None => u64::from(UNVERSIONED),
        Some(v) => v.trim().parse().unwrap_or(u64::MAX),
    }
}

#[derive(Serialize)]
struct HolderValue<'a> {
    v: u64,
    worker: &'a str,
    /// Which run of the worker: a worker restarted under the same id
    /// writes another. Lets a run tell its own write, whose answer it lost,
    /// from one by an earlier run (readers that only want the worker ignore
    /// it, as every release since format 2 does with fields it does not know).
    instance: &'a str,
}

/// The value of a partition lease or a worker heartbeat held by `worker`
/// in its run `instance`.
pub fn holder_value(worker: &str, instance: &str) -> Vec<u8> {
    serde_json::to_vec(&HolderValue {
        v: u64::from(HOLDER),
        worker,
        instance,
    })
    .expect("strings and a number serialize")
}

/// Why a lease or heartbeat value names no worker this release can use.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HolderError {
    #[error(transparent)]
    Newer(#[from] NewerFormat),
    #[error("a lease value that is neither a worker id nor {{\"v\":N,\"worker\":...}}: {0}")]
    Unreadable(String),
}

/// The worker a lease or heartbeat value names: a bare worker id (format
/// 1) or the JSON of [`holder_value`] (format 2 on).
pub fn holder_of(value: &[u8]) -> Result<String, HolderError> {
    if value.first() != Some(&b'{') {
        // Worker ids never start with `{` (SPEC §5: A-Z a-z 0-9 _ -).
        return Ok(String::from_utf8_lossy(value).into_owned());
    }
    // The version is checked before the worker is required: a newer format
    // may not name it, or not as a string.
    #[derive(Deserialize)]
    struct AnyVersion {
        v: u64,
        worker: Option<serde_json::Value>,
    }
    let value: AnyVersion =
        serde_json::from_slice(value).map_err(|e| HolderError::Unreadable(e.to_string()))?;
    check(HOLDER, || "a lease value".to_string(), value.v)?;
    match value.worker {
        Some(serde_json::Value::String(worker)) => Ok(worker),
        _ => Err(HolderError::Unreadable("no \"worker\" string".to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holder_values_of_both_formats_name_the_worker() {
        assert_eq!(holder_of(b"w-1").unwrap(), "w-1");
        assert_eq!(
            holder_value("w-1", "i7"),
            br#"{"v":2,"worker":"w-1","instance":"i7"}"#
        );
        assert_eq!(holder_of(&holder_value("w-1", "i7")).unwrap(), "w-1");
        assert_eq!(holder_of(br#"{"v":2,"worker":"w-1"}"#).unwrap(), "w-1");
        // Fields a newer release of the same format might add are ignored.
        assert_eq!(
            holder_of(br#"{"v":2,"worker":"w-1","zone":"b"}"#).unwrap(),
            "w-1"
        );
    }

    #[test]
    fn newer_or_unreadable_holder_values_are_refused() {
        let newer = holder_of(br#"{"v":3,"worker":{"id":"w-1"}}"#).unwrap_err();
        assert_eq!(
            newer,
            HolderError::Newer(NewerFormat {
                what: "a lease value".into(),
                found: 3,
                reads: 2,
            })
        );
        assert!(newer
            .to_string()
            .contains("format v3, newer than this sluice reads (v2)"));
        assert!(matches!(
            holder_of(br#"{"v":3,"owner":{"id":"w-1"}}"#).unwrap_err(),
            HolderError::Newer(_)
        ));
        assert!(matches!(
            holder_of(b"{not json").unwrap_err(),
            HolderError::Unreadable(_)
        ));
        assert!(matches!(
            holder_of(br#"{"v":2}"#).unwrap_err(),
            HolderError::Unreadable(_)
        ));
    }

    #[test]
    fn journal_headers_name_their_format() {
        assert_eq!(of_header(None), 1);
        assert_eq!(of_header(Some("2")), 2);
        assert_eq!(of_header(Some("v9")), u64::MAX);
        assert!(check(JOURNAL, || "x".into(), of_header(Some("8"))).is_ok());
        let newer = check(JOURNAL, || "x".into(), of_header(Some("9"))).unwrap_err();
        assert!(newer
            .to_string()
            .contains("format v9, newer than this sluice reads (v8)"));
        // Each kind has its own newest: a lease value of 3 is refused.
        assert!(check(HOLDER, || "x".into(), 3).is_err());
    }
}
