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
//! Fencing: the manifest records the lease revision of the writer. A writer
//! whose lease revision is older than the manifest's refuses to write (it
//! lost the partition), and a new owner re-writes the manifest with its own
//! lease revision before it answers, so the CAS of any late write by the old
//! owner fails.

use crate::counters::Entry;
use crate::store::SNAPSHOT_BUCKET;
use anyhow::{anyhow, bail, Context as _, Result};

use async_nats::jetstream::{kv, Context};
use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// Chunk payload size: well under the 1 MiB default max payload, leaving room
/// for headers (a CAS update adds ~52 bytes; see the notes).
pub const CHUNK_BYTES: usize = 512 * 1024;

/// What `p.<n>` holds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Generation of the chunks; unique per write.
    pub gen: String,
    pub chunks: u32,
    pub bytes: u64,
    pub entries: u64,
    /// Lease revision of the worker that wrote it (the fencing token).
    pub lease_rev: u64,
    /// Journal sequence covered by the snapshot: replay starts after it.
    pub journal_seq: u64,
    /// Wall-clock ms when it was taken.
    pub taken_at_ms: u64,
    pub worker: String,
}

pub fn manifest_key(partition: u32) -> String {
    format!("p.{partition}")
}

fn chunk_key(partition: u32, gen: &str, index: u32) -> String {
    format!("p.{partition}.g{gen}.c{index}")
}

/// The manifest and its KV revision (0 when there is none yet).
pub async fn read_manifest(kv: &kv::Store, partition: u32) -> Result<(Option<Manifest>, u64)> {
    match kv.entry(manifest_key(partition)).await? {
        Some(e) if e.operation == kv::Operation::Put => {
            let m: Manifest = serde_json::from_slice(&e.value).with_context(|| {
                format!("snapshot manifest of partition {partition} is unreadable")
            })?;
            Ok((Some(m), e.revision))
        }
        Some(e) => Ok((None, e.revision)),
        None => Ok((None, 0)),
    }
}

/// Reads the chunks a manifest names and decodes the entries.
pub async fn read_entries(kv: &kv::Store, partition: u32, m: &Manifest) -> Result<Vec<Entry>> {
    if m.chunks == 0 {
        return Ok(Vec::new());
    }
    let mut bytes = Vec::with_capacity(m.bytes as usize);
    for i in 0..m.chunks {
        let key = chunk_key(partition, &m.gen, i);
        let chunk = kv
            .get(&key)
            .await?
            .ok_or_else(|| anyhow!("snapshot chunk {key} is missing"))?;
        bytes.extend_from_slice(&chunk);
    }
    if bytes.len() as u64 != m.bytes {
        bail!(
            "snapshot of partition {partition} has {} bytes, its manifest says {}",
            bytes.len(),
            m.bytes
        );
    }
    match rmp_serde::from_slice(&bytes) {
        Ok(entries) => Ok(entries),
        Err(e) => {
            // Retrying cannot fix it, and refusing would leave the partition
            // unanswered for good: start from nothing, loudly.
            tracing::error!(
                partition,
                "snapshot generation {} cannot be decoded ({e}); starting the partition with no counters",
                m.gen
            );
            Ok(Vec::new())
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
    let value = Bytes::from(serde_json::to_vec(m)?);
    let key = manifest_key(partition);
    let rev = if expected == 0 {
        kv.create(&key, value).await.map_err(|e| anyhow!("{e}"))?
    } else {
        kv.update(&key, value, expected)
            .await
            .map_err(|e| anyhow!("{e}"))?
    };
    Ok(rev)
}

/// Writes a new generation and switches the manifest to it. Returns the new
/// manifest revision. Fails without switching when the manifest moved on
/// (someone else owns the partition now).
pub async fn write(
    js: &Context,
    kv: &kv::Store,
    partition: u32,
    entries: &[Entry],
    mut manifest: Manifest,
    expected_rev: u64,
    previous_gen: Option<&str>,
) -> Result<u64> {
    let bytes = rmp_serde::to_vec(entries)?;
    let chunks: Vec<&[u8]> = if bytes.is_empty() {
        Vec::new()
    } else {
        bytes.chunks(CHUNK_BYTES).collect()
    };
    let mut acks = Vec::with_capacity(chunks.len());
    for (i, chunk) in chunks.iter().enumerate() {
        let subject = format!(
            "$KV.{SNAPSHOT_BUCKET}.{}",
            chunk_key(partition, &manifest.gen, i as u32)
        );
        acks.push(js.publish(subject, Bytes::copy_from_slice(chunk)).await?);
    }
    for ack in acks {
        ack.await.context("snapshot chunk was not stored")?;
    }
    manifest.chunks = chunks.len() as u32;
    manifest.bytes = bytes.len() as u64;
    manifest.entries = entries.len() as u64;
    match write_manifest(kv, partition, &manifest, expected_rev).await {
        Ok(rev) => {
            if let Some(old) = previous_gen.filter(|g| *g != manifest.gen) {
                purge_generation(js, partition, old).await;
            }
            Ok(rev)
        }
        Err(e) => {
            purge_generation(js, partition, &manifest.gen).await;
            Err(e.context(format!(
                "snapshot of partition {partition} lost the race for its manifest"
            )))
        }
    }
}

/// Removes a generation's chunks, markers included (a stream purge, so no
/// tombstones pile up). Best effort: a leftover generation only costs space.
async fn purge_generation(js: &Context, partition: u32, gen: &str) {
    let filter = format!("$KV.{SNAPSHOT_BUCKET}.p.{partition}.g{gen}.>");
    let stream = match js.get_stream(format!("KV_{SNAPSHOT_BUCKET}")).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(partition, "cannot purge old snapshot chunks: {e}");
            return;
        }
    };
    if let Err(e) = stream.purge().filter(filter).await {
        tracing::warn!(partition, "cannot purge old snapshot chunks: {e}");
    }
}
