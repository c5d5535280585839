//! Partition snapshots in JetStream KV: chunked, atomic, fenced.
//!
//! A partition's counters are encoded (MessagePack) and split into chunks of
//! at most [`CHUNK_BYTES`], so a partition of any size fits under the server's
//! default 1 MiB max payload. Chunks go to keys of a fresh generation
//! (`p.<n>.g<gen>.c<i>`); only then is the manifest `p.<n>` switched to that
//! generation with a compare-and-set on its revision, and the previous
//! generation is purged from the stream. A crash mid-write leaves the old
//! manifest pointing at intact chunks.
//!
//! The state kept beside the counters ([`Carried`]: holds, slices, alerts,
//! remembered ids) travels in the manifest while it is small, and past
//! [`CARRIED_IN_MANIFEST_MOST`] in the chunks after the counters
//! ([`Manifest::carried_bytes`]): one value in KV cannot pass the max
//! payload, and a partition may remember thousands of ids.
//!
//! Fencing: the manifest records the lease revision of the writer. A writer
//! whose lease revision is older than the manifest's refuses to write (it
//! lost the partition), and a new owner re-writes the manifest with its own
//! lease revision before it answers, so the CAS of any late write by the old
//! owner fails.

use crate::counters::{Entry, TurnCopy};
use crate::kept::Carried;
use crate::store::{self, Stores};
use anyhow::{anyhow, bail, Context as _, Result};
use sluice_core::storage::{
    chunk_key, generation_keys, kv_subject, partition_key, SNAPSHOT_BUCKET,
};

use async_nats::jetstream::{kv, stream};
use bytes::{BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use sluice_core::ask_ids::CarriedId;
use sluice_core::format;
use sluice_core::policy::KeyState;
use sluice_core::time::Nanos;

/// Chunk payload size: well under the 1 MiB default max payload, leaving room
/// for headers (a CAS update adds ~52 bytes; see the notes).
pub const CHUNK_BYTES: usize = 512 * 1024;

/// What `p.<n>` holds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Format of the manifest and its chunks ([`sluice_core::format`]);
    /// absent in format 1. Written in the oldest format that holds what
    /// it holds ([`manifest_json`]).
    #[serde(default = "unversioned")]
    pub v: u64,
    /// Generation of the chunks; unique per write.
    pub gen: String,
    pub chunks: u32,
    pub bytes: u64,
    pub entries: u64,
    /// Lease revision of the worker that wrote it (the fencing token).
    pub lease_rev: u64,
    /// Journal sequence covered by the snapshot: replay starts after it.
    pub journal_seq: u64,
    /// The number of the last turn the chunks hold
    /// ([`crate::counters::Turns`]): replay applies only the records
    /// numbered above it (0, as written before turns were numbered: every
    /// record after `journal_seq`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub turn: u64,
    /// Workers that may have journaled records of the partition after
    /// `journal_seq`: the owners since the snapshot (journal mode).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub journal_writers: Vec<String>,
    /// Wall-clock ms when it was taken.
    pub taken_at_ms: u64,
    pub worker: String,
    /// When not 0 (format 3), the last `carried_bytes` bytes of the chunks
    /// are [`Manifest::carried`] in MessagePack, and the manifest as
    /// stored leaves it out.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub carried_bytes: u64,
    /// A handover's final snapshot, not fenced by a new owner since: its
    /// owner changed nothing after its copy, so what it carries only at
    /// a handover (a delegate's slices, [`crate::kept`]) is exact for the
    /// first owner after it. Left out when false (earlier releases ignore
    /// it, and read a manifest without it as not a handover's).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub handover: bool,
    /// What the owner keeps beside the counters' values (budget slices
    /// not back yet, ...: [`crate::kept`]), each under a field of its own:
    /// in the manifest, or in the chunks (`carried_bytes`).
    #[serde(flatten)]
    pub carried: Carried,
    /// Its chunks hold a blocked key's state (SPEC §18): it is written in
    /// [`format::SNAPSHOT_BLOCKS`] (or later), which releases before blocks refuse. Not a
    /// field of its own: the format says it.
    #[serde(skip)]
    pub blocks: bool,
}

/// The most bytes of carried state (in MessagePack; about twice as much
/// as JSON) a manifest holds itself; more goes in the chunks.
pub const CARRIED_IN_MANIFEST_MOST: usize = 64 * 1024;

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Manifest {
    /// Lists `worker` among the writers whose records a takeover after
    /// this snapshot reads (once).
    pub fn lists_writer(&mut self, worker: &str) {
        if !self.journal_writers.iter().any(|w| w == worker) {
            self.journal_writers.push(worker.to_string());
        }
    }

    /// When its restored counters are judged idle, at a takeover at
    /// `now`: when it was taken (at most `now`). The journal's records
    /// after it are replayed at their own times, from then on: a counter
    /// idle by `now` but not by a record's time is still the state that
    /// record changed (a GCRA's or bucket's level in the future then),
    /// and dropped, the record would start it over from whole.
    pub fn idle_judged_at(&self, now: Nanos) -> Nanos {
        Nanos::from_millis(self.taken_at_ms).min(now)
    }
}

fn unversioned() -> u64 {
    u64::from(format::UNVERSIONED)
}

/// A partition's manifest has the key of its lease.
pub fn manifest_key(partition: u32) -> String {
    partition_key(partition)
}

/// The manifest and its KV revision (0 when there is none yet), from the
/// stream's leader within [`store::TAKEOVER_REQUEST_TIMEOUT`].
pub async fn read_manifest(kv: &kv::Store, partition: u32) -> Result<(Option<Manifest>, u64)> {
    let key = manifest_key(partition);
    match store::takeover_request("read the snapshot manifest", store::entry(kv, &key)).await? {
        Some(e) if e.operation == kv::Operation::Put => {
            // The version first: a newer format may not parse as ours.
            #[derive(Deserialize)]
            struct Version {
                #[serde(default = "unversioned")]
                v: u64,
            }
            let unreadable = || format!("snapshot manifest of partition {partition} is unreadable");
            let version: Version = serde_json::from_slice(&e.value).with_context(unreadable)?;
            format::check(
                format::SNAPSHOT,
                || format!("the snapshot manifest of partition {partition}"),
                version.v,
            )?;
            let m: Manifest = serde_json::from_slice(&e.value).with_context(unreadable)?;
            Ok((Some(m), e.revision))
        }
        Some(e) => Ok((None, e.revision)),
        None => Ok((None, 0)),
    }
}

/// Reads the chunks a manifest names (from the stream's leader, each
/// within [`store::TAKEOVER_REQUEST_TIMEOUT`]) and decodes the entries.
pub async fn read_entries(
    kv: &kv::Store,
    partition: u32,
    m: &Manifest,
) -> Result<(Vec<Entry>, Option<Carried>)> {
    if m.chunks == 0 {
        return Ok((Vec::new(), None));
    }
    let mut bytes = Vec::with_capacity(m.bytes as usize);
    for i in 0..m.chunks {
        let key = chunk_key(partition, &m.gen, i);
        let chunk = store::takeover_request("read a snapshot chunk", store::entry(kv, &key))
            .await?
            .filter(|e| e.operation == kv::Operation::Put)
            .ok_or_else(|| anyhow!("snapshot chunk {key} is missing"))?;
        bytes.extend_from_slice(&chunk.value);
    }
    decode(partition, m, &bytes)
}

/// The entries and carried state of a snapshot's bytes (its chunks, in
/// order), as [`read_entries`] reads them: an error only when the bytes
/// are not what the manifest says; what cannot be decoded is logged and
/// started without.
pub fn decode(partition: u32, m: &Manifest, bytes: &[u8]) -> Result<(Vec<Entry>, Option<Carried>)> {
    if bytes.len() as u64 != m.bytes {
        bail!(
            "snapshot of partition {partition} has {} bytes, its manifest says {}",
            bytes.len(),
            m.bytes
        );
    }
    let (entries, carried) = bytes.split_at(bytes.len().saturating_sub(m.carried_bytes as usize));
    let carried = match carried.is_empty() {
        true => None,
        false => match rmp_serde::from_slice(carried) {
            Ok(carried) => Some(carried),
            Err(e) => {
                tracing::error!(
                    partition,
                    "the state carried in snapshot generation {} cannot be decoded ({e}); the partition starts without its holds, slices, alerts and ids",
                    m.gen
                );
                Some(Carried::default())
            }
        },
    };
    if entries.is_empty() {
        return Ok((Vec::new(), carried));
    }
    match rmp_serde::from_slice(entries) {
        Ok(entries) => Ok((entries, carried)),
        Err(e) => {
            // Retrying cannot fix it, and refusing would leave the partition
            // unanswered for good: start from nothing, loudly.
            tracing::error!(
                partition,
                "snapshot generation {} cannot be decoded ({e}); starting the partition with no counters",
                m.gen
            );
            Ok((Vec::new(), carried))
        }
    }
}

/// CAS-writes `m` as the manifest; `expected` is the revision read before (0 = none).
pub async fn write_manifest(
    kv: &kv::Store,
    partition: u32,
    m: &Manifest,
    expected: u64,
) -> Result<u64> {
    let value = Bytes::from(manifest_json(m)?);
    let key = manifest_key(partition);
    let rev = if expected == 0 {
        store::create(kv, &key, value)
            .await?
            .ok_or_else(|| anyhow!("another worker wrote the manifest {key} first"))?
    } else {
        kv.update(&key, value, expected)
            .await
            .map_err(|e| anyhow!("{e}"))?
    };
    Ok(rev)
}

/// The manifest as stored: in the format it needs, without the carried
/// state that travels in the chunks.
fn manifest_json(m: &Manifest) -> Result<Vec<u8>> {
    let in_chunks = m.carried_bytes > 0;
    // An id waiting for its start (SPEC §18) is in the carried state
    // whether that travels in the manifest or in the chunks.
    let waits = m.carried.ids.iter().any(CarriedId::waits);
    let v = match (waits, m.blocks, in_chunks) {
        (true, _, _) => format::SNAPSHOT,
        (false, true, _) => format::SNAPSHOT_BLOCKS,
        (false, false, true) => format::SNAPSHOT_CARRIED_IN_CHUNKS,
        (false, false, false) => format::SNAPSHOT_CARRIED_INLINE,
    };
    let m = Manifest {
        v: u64::from(v),
        gen: m.gen.clone(),
        chunks: m.chunks,
        bytes: m.bytes,
        entries: m.entries,
        lease_rev: m.lease_rev,
        journal_seq: m.journal_seq,
        turn: m.turn,
        journal_writers: m.journal_writers.clone(),
        taken_at_ms: m.taken_at_ms,
        worker: m.worker.clone(),
        carried_bytes: m.carried_bytes,
        handover: m.handover,
        carried: match in_chunks {
            true => Carried::default(),
            false => m.carried.clone(),
        },
        blocks: m.blocks,
    };
    Ok(serde_json::to_vec(&m)?)
}

/// A partition's counters, encoded and cut into chunks, ready to be written.
#[derive(Debug, Default)]
pub struct Encoded {
    chunks: Vec<Bytes>,
    pub bytes: u64,
    pub entries: u64,
    /// The bytes of carried state after the counters' (0: none, it stays
    /// in the manifest).
    pub carried_bytes: u64,
    /// A counter is a blocked key's ([`Manifest::blocks`]).
    pub blocks: bool,
}

impl Encoded {
    /// The chunks, in order: their concatenation is the snapshot's bytes.
    pub fn chunks(&self) -> &[Bytes] {
        &self.chunks
    }

    /// The manifest's account of these chunks, as [`write`] writes it.
    pub fn describe(&self, manifest: &mut Manifest) {
        manifest.carried_bytes = self.carried_bytes;
        manifest.chunks = self.chunks.len() as u32;
        manifest.bytes = self.bytes;
        manifest.entries = self.entries;
        manifest.blocks = self.blocks;
    }
}

/// What `rmp_serde` writes for an [`Entry`], from borrowed parts.
#[derive(Serialize)]
struct EntryRef<'a> {
    key: &'a str,
    state: &'a KeyState,
}

/// MessagePack's array header with a 32-bit count, which any count may use.
const ARRAY32: u8 = 0xdd;

/// Encodes a copy of the counters made between two turns
/// ([`crate::counters::TurnCopy`]) while iterating over it, straight into
/// chunk-sized buffers: the copy is the packed tables as they are (~40
/// bytes a key), so a snapshot costs about that plus its encoded size in
/// memory (~50 bytes a key) while it is written. The bytes are what `rmp_serde` writes for a
/// `Vec<Entry>`, except that the array header always has the 32-bit form,
/// so the count can be filled in once it is known.
///
/// The state kept beside the counters (`carried`, read in the same copy)
/// follows them in the chunks when it is too large for the manifest
/// ([`CARRIED_IN_MANIFEST_MOST`]).
///
/// Synchronous and CPU-bound: run it with [`crate::blocking::run`], off the thread
/// that answers requests.
pub fn encode(counters: &TurnCopy, carried: &Carried, now: Nanos) -> Result<Encoded> {
    let mut encoded = encode_counters(counters, now)?;
    if *carried == Carried::default() {
        return Ok(encoded);
    }
    // Room for what most partitions carry, so that a large one grows from
    // there, not from a few bytes (each growth copies and faults in pages).
    let mut packed = Vec::with_capacity(CARRIED_IN_MANIFEST_MOST);
    rmp_serde::encode::write_named(&mut packed, carried)
        .context("cannot encode the state carried beside the counters")?;
    if packed.len() <= CARRIED_IN_MANIFEST_MOST {
        return Ok(encoded);
    }
    encoded.carried_bytes = packed.len() as u64;
    encoded.bytes += packed.len() as u64;
    let packed = Bytes::from(packed);
    for start in (0..packed.len()).step_by(CHUNK_BYTES) {
        let end = (start + CHUNK_BYTES).min(packed.len());
        encoded.chunks.push(packed.slice(start..end));
    }
    Ok(encoded)
}

/// The counters alone, as [`encode`] writes them: a key whose block
/// (SPEC §18) has ended by `now` as its counters alone, so that a
/// snapshot holds no block that is over (and is format 4 only while one
/// is not).
fn encode_counters(counters: &TurnCopy, now: Nanos) -> Result<Encoded> {
    let mut buf = BytesMut::with_capacity(CHUNK_BYTES);
    buf.put_u8(ARRAY32);
    buf.put_u32(0);
    let mut first: Option<BytesMut> = None;
    let mut rest = Vec::new();
    let mut entries: u64 = 0;
    let mut failed = None;
    let mut blocks = false;
    counters.for_each(|key, state| {
        if failed.is_some() {
            return;
        }
        let state = match state {
            KeyState::Blocked(b) if b.until <= now => &b.counters,
            state => state,
        };
        blocks |= matches!(state, KeyState::Blocked(_));
        if let Err(e) = rmp_serde::encode::write(&mut (&mut buf).writer(), &EntryRef { key, state })
        {
            failed = Some(e);
            return;
        }
        entries += 1;
        while buf.len() >= CHUNK_BYTES {
            let chunk = buf.split_to(CHUNK_BYTES);
            match first {
                None => first = Some(chunk),
                Some(_) => rest.push(chunk.freeze()),
            }
        }
    });
    if let Some(e) = failed {
        return Err(anyhow!(e).context("cannot encode a counter for the snapshot"));
    }
    if entries == 0 {
        return Ok(Encoded::default());
    }
    let count = u32::try_from(entries).context("too many counters for one snapshot")?;
    let mut first = match first {
        Some(first) => {
            if !buf.is_empty() {
                rest.push(buf.freeze());
            }
            first
        }
        None => buf,
    };
    first[1..5].copy_from_slice(&count.to_be_bytes());
    let mut chunks = Vec::with_capacity(rest.len() + 1);
    chunks.push(first.freeze());
    chunks.append(&mut rest);
    let bytes = chunks.iter().map(|c| c.len() as u64).sum();
    Ok(Encoded {
        chunks,
        bytes,
        entries,
        carried_bytes: 0,
        blocks,
    })
}

/// Writes a new generation and switches the manifest to it. Returns the
/// manifest as written (with its chunks, bytes and entries) and its new
/// revision. Fails without switching when the manifest moved on
/// (someone else owns the partition now).
pub async fn write(
    stores: &Stores,
    partition: u32,
    encoded: Encoded,
    mut manifest: Manifest,
    expected_rev: u64,
    previous_gen: Option<&str>,
) -> Result<(Manifest, u64)> {
    encoded.describe(&mut manifest);
    let mut acks = Vec::with_capacity(encoded.chunks.len());
    for (i, chunk) in encoded.chunks.iter().enumerate() {
        let subject = kv_subject(
            SNAPSHOT_BUCKET,
            &chunk_key(partition, &manifest.gen, i as u32),
        );
        acks.push(stores.js.publish(subject, chunk.clone()).await?);
    }
    for ack in acks {
        ack.await.context("snapshot chunk was not stored")?;
    }
    match write_manifest(&stores.snapshots, partition, &manifest, expected_rev).await {
        Ok(rev) => {
            if let Some(old) = previous_gen.filter(|g| *g != manifest.gen) {
                purge_generation(&stores.snapshot_stream, partition, old).await;
            }
            Ok((manifest, rev))
        }
        Err(e) => {
            purge_generation(&stores.snapshot_stream, partition, &manifest.gen).await;
            Err(e.context(format!(
                "snapshot of partition {partition} lost the race for its manifest"
            )))
        }
    }
}

/// Removes a generation's chunks, markers included (a stream purge, so no
/// tombstones pile up). Best effort: a leftover generation only costs space.
async fn purge_generation(stream: &stream::Stream, partition: u32, gen: &str) {
    let filter = kv_subject(SNAPSHOT_BUCKET, &generation_keys(partition, gen));
    if let Err(e) = stream.purge().filter(filter).await {
        tracing::warn!(partition, "cannot purge old snapshot chunks: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::Counters;
    use sluice_core::ask::{counter_key, Op};
    use sluice_core::policy::Policy;
    use sluice_core::time::Nanos;

    fn counters_with(keys: usize) -> Counters {
        let counters = Counters::new();
        let policy = Policy::builtin_default();
        let mut key = String::new();
        for i in 0..keys {
            counter_key(&mut key, policy.name(), &format!("user-{i}"));
            counters.apply(&policy, &key, Nanos::from_secs(1_000), Op::Allow(1));
        }
        counters
    }

    fn copied(counters: &Counters) -> TurnCopy {
        counters
            .copy_between_turns(|_| ())
            .expect("no turn in progress")
            .0
    }

    fn decoded(encoded: &Encoded) -> Vec<Entry> {
        let bytes: Vec<u8> = encoded
            .chunks
            .iter()
            .flat_map(|c| c.iter().copied())
            .collect();
        assert_eq!(bytes.len() as u64, encoded.bytes);
        rmp_serde::from_slice(&bytes).expect("rmp_serde reads what encode wrote")
    }

    #[test]
    fn no_counters_make_no_chunks() {
        let encoded = encode(&copied(&Counters::new()), &Carried::default(), Nanos::ZERO).unwrap();
        assert_eq!(
            (encoded.chunks.len(), encoded.bytes, encoded.entries),
            (0, 0, 0)
        );
    }

    #[test]
    fn the_encoding_is_a_vec_of_entries_split_into_full_chunks() {
        // Enough keys for several chunks.
        let counters = counters_with(30_000);
        let encoded = encode(&copied(&counters), &Carried::default(), Nanos::ZERO).unwrap();
        assert_eq!(encoded.entries, 30_000);
        assert!(encoded.chunks.len() >= 2, "{} chunks", encoded.chunks.len());
        let (last, full) = encoded.chunks.split_last().unwrap();
        assert!(full.iter().all(|c| c.len() == CHUNK_BYTES));
        assert!(!last.is_empty() && last.len() <= CHUNK_BYTES);
        let mut entries = decoded(&encoded);
        entries.sort_by(|a, b| a.key.cmp(&b.key));
        let mut expected = Vec::new();
        counters.for_each(|key, state| {
            expected.push(Entry {
                key: key.to_string(),
                state: state.clone(),
            })
        });
        expected.sort_by(|a, b| a.key.cmp(&b.key));
        assert_eq!(entries, expected);
    }

    #[test]
    fn a_small_partition_is_one_chunk() {
        let encoded = encode(&copied(&counters_with(3)), &Carried::default(), Nanos::ZERO).unwrap();
        assert_eq!((encoded.chunks.len(), encoded.entries), (1, 3));
        assert_eq!(decoded(&encoded).len(), 3);
    }

    /// The format a manifest of `encoded` is stored in.
    fn stored_format(encoded: &Encoded) -> u64 {
        let mut manifest = Manifest::default();
        encoded.describe(&mut manifest);
        let json: serde_json::Value =
            serde_json::from_slice(&manifest_json(&manifest).unwrap()).unwrap();
        json["v"].as_u64().unwrap()
    }

    /// An id whose first answer's start is to come (SPEC §18) moves the
    /// manifest to format 5, whether the carried state is in it or in the
    /// chunks; ids without one leave it where it was.
    #[test]
    fn an_id_waiting_for_its_start_moves_the_snapshot_to_format_5() {
        let id = |fields: &str| -> CarriedId {
            let json = format!(r#"["k\nid","allow","p",1,[1,2,3,false],null,99{fields}]"#);
            serde_json::from_str(&json).unwrap()
        };
        let format_carrying = |carried: CarriedId, in_chunks: bool| {
            let mut manifest = Manifest::default();
            manifest.carried.ids = vec![carried];
            manifest.carried_bytes = u64::from(in_chunks);
            let json: serde_json::Value =
                serde_json::from_slice(&manifest_json(&manifest).unwrap()).unwrap();
            json["v"].as_u64().unwrap()
        };
        let five = u64::from(format::SNAPSHOT);
        assert_eq!(five, 5);
        assert_eq!(format_carrying(id(",50"), false), five);
        assert_eq!(format_carrying(id(",50"), true), five);
        let inline = u64::from(format::SNAPSHOT_CARRIED_INLINE);
        assert_eq!(format_carrying(id(""), false), inline);
    }

    #[test]
    fn a_blocked_key_moves_the_snapshot_to_the_format_that_holds_blocks() {
        let counters = counters_with(3);
        let encoded = encode(&copied(&counters), &Carried::default(), Nanos::ZERO).unwrap();
        assert!(!encoded.blocks);
        let inline = u64::from(format::SNAPSHOT_CARRIED_INLINE);
        assert_eq!(
            stored_format(&encoded),
            inline,
            "what the release before reads"
        );
        // A denial under a penalty blocks the key (SPEC §18).
        let strict = Policy::builtin_default()
            .with_block_for(std::time::Duration::from_secs(60))
            .unwrap();
        let mut key = String::new();
        counter_key(&mut key, strict.name(), "user-0");
        let at = Nanos::from_secs(1_000);
        let denied = counters.apply(&strict, &key, at, Op::Allow(15));
        assert!(denied.blocked, "{denied:?}");
        let encoded = encode(&copied(&counters), &Carried::default(), at).unwrap();
        assert!(encoded.blocks);
        assert_eq!(stored_format(&encoded), u64::from(format::SNAPSHOT_BLOCKS));
        let blocked = decoded(&encoded)
            .into_iter()
            .find(|e| e.key == key)
            .unwrap();
        assert_eq!(
            strict.blocked_until(&blocked.state, at),
            Some(Nanos::from_secs(1_060))
        );
    }
}
