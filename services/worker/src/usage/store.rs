//! Usage records in JetStream: one stream per tier, one subject per
//! partition and bucket, `sluice.usage.<step>.<partition>.<bucket-ms>`.
//!
//! Each stream keeps one message per subject (`max_msgs_per_subject = 1`:
//! a rewritten bucket replaces its record) and drops records older than
//! the tier keeps (`max_age`), so retention is JetStream's, not a timer of
//! ours. `allow_direct` lets a bucket be read with one direct get; a range
//! of buckets is read with an ordered consumer from the range's start time.

use crate::store::while_not_ready;
use crate::usage::ledger::WriteMarks;
use anyhow::{Context as _, Result};
use async_nats::jetstream::{self, consumer, stream};
use bytes::Bytes;
use futures::StreamExt;
use sluice_core::nats_config::MAX_PAYLOAD;
use sluice_core::storage::{usage_partition_prefix, usage_stream, usage_subject, usage_subjects};
use sluice_core::usage::{BucketId, Tier};
use std::collections::HashMap;
use std::time::Duration;

/// Buckets read with one direct get each, up to this many; more with a
/// consumer over the range.
const DIRECT_GETS: usize = 16;

/// How much earlier than a bucket's start its record may carry the
/// server's timestamp (the owner's clock ahead of the server's).
const CLOCK_SLACK_MS: u64 = 120_000;

/// How long reading one range may take.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The stream of `config`: as it is when its retention matches, updated
/// when it does not, created when it does not exist.
async fn open_stream(js: &jetstream::Context, config: &stream::Config) -> Result<stream::Stream> {
    let name = &config.name;
    match js.get_stream(name).await {
        Ok(mut stream) => {
            let found = &stream.cached_info().config;
            if found.max_age != config.max_age || found.num_replicas != config.num_replicas {
                js.update_stream(config.clone())
                    .await
                    .with_context(|| format!("cannot update the usage stream {name}"))?;
                stream = js.get_stream(name).await?;
            }
            Ok(stream)
        }
        Err(e) if is_not_found(&e) => js
            .get_or_create_stream(config.clone())
            .await
            .with_context(|| format!("cannot create the usage stream {name}")),
        Err(e) => Err(e).with_context(|| format!("cannot open the usage stream {name}")),
    }
}

fn is_not_found(e: &jetstream::context::GetStreamError) -> bool {
    matches!(e.kind(), jetstream::context::GetStreamErrorKind::JetStream(j) if j.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND)
}

/// The header that marks which writes of which ledgers a record holds
/// ([`WriteMarks`]).
const WRITE_HEADER: &str = "Sluice-Usage-Write";

/// A bucket's record as stored: its bytes (read them with
/// [`sluice_core::usage::visit_record`]), its stream sequence and the
/// marks of the flushes that wrote it (none for a rollup).
pub struct StoredRecord {
    pub payload: Bytes,
    pub seq: u64,
    pub marks: WriteMarks,
}

/// Why a record was not stored.
#[derive(Debug, thiserror::Error)]
pub enum PutError {
    /// The bucket's record is not the one expected: another worker wrote
    /// it meanwhile.
    #[error("the usage record was written by another worker meanwhile")]
    Moved,
    #[error(transparent)]
    Failed(anyhow::Error),
}

/// The tier streams.
#[derive(Clone)]
pub struct UsageStore {
    js: jetstream::Context,
    tiers: Vec<Tier>,
    streams: Vec<stream::Stream>,
}

impl UsageStore {
    /// Opens the tier streams, creating them (or bringing their retention
    /// in line with `tiers`) when needed, each once JetStream can place it
    /// ([`while_not_ready`]).
    pub async fn open(
        js: jetstream::Context,
        tiers: &[Tier],
        replicas: usize,
    ) -> Result<UsageStore> {
        let mut streams = Vec::with_capacity(tiers.len());
        for tier in tiers {
            let name = tier.name();
            let config = stream::Config {
                name: usage_stream(&name),
                description: Some(format!(
                    "sluice usage per partition in {name} buckets (SPEC §9)"
                )),
                subjects: vec![usage_subjects(&name)],
                max_age: tier.keep,
                max_messages_per_subject: 1,
                allow_direct: true,
                num_replicas: replicas,
                storage: stream::StorageType::File,
                ..Default::default()
            };
            let what = format!("the usage stream {}", config.name);
            let stream = while_not_ready(&what, || open_stream(&js, &config)).await?;
            streams.push(stream);
        }
        Ok(UsageStore {
            js,
            tiers: tiers.to_vec(),
            streams,
        })
    }

    fn subject(&self, partition: u32, (tier, bucket): BucketId) -> String {
        usage_subject(&self.tiers[tier].name(), partition, bucket)
    }

    /// Stores `record` (encoded) as the record of `bucket` of `partition`,
    /// marked `marks` (a flush's write; `None` for a rollup), replacing the
    /// one before, which must be at stream sequence `expected` (0: none),
    /// else [`PutError::Moved`]. Returns the new record's sequence.
    pub async fn put(
        &self,
        partition: u32,
        bucket: BucketId,
        record: Vec<u8>,
        expected: u64,
        marks: Option<&WriteMarks>,
    ) -> Result<u64, PutError> {
        let subject = self.subject(partition, bucket);
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(
            async_nats::header::NATS_EXPECTED_LAST_SUBJECT_SEQUENCE,
            expected.to_string().as_str(),
        );
        if let Some(marks) = marks {
            headers.insert(WRITE_HEADER, marks.to_header().as_str());
        }
        let failed = |e: &dyn std::fmt::Display| {
            PutError::Failed(anyhow::anyhow!("cannot store usage on {subject}: {e}"))
        };
        let ack = self
            .js
            .publish_with_headers(subject.clone(), headers, record.into())
            .await
            .map_err(|e| match e.kind() {
                jetstream::context::PublishErrorKind::MaxPayloadExceeded => {
                    PutError::Failed(anyhow::anyhow!(
                        "cannot store usage on {subject}: {e}. One record holds every key the \
                         partition counted in this bucket: raise nats-server's max_payload \
                         (`sluice nats-config` sets {} MiB) or use more partitions. Until then the \
                         bucket is not stored: a minute's counts wait in memory, a rollup is \
                         tried again (docs/USAGE.md, \"Limits\")",
                        MAX_PAYLOAD >> 20
                    ))
                }
                _ => failed(&e),
            })?
            .await;
        match ack {
            Ok(ack) => Ok(ack.sequence),
            Err(e) if e.kind() == jetstream::context::PublishErrorKind::WrongLastSequence => {
                Err(PutError::Moved)
            }
            Err(e) => Err(failed(&e)),
        }
    }

    /// Stores `record` (encoded) as the record of `bucket` of `partition`
    /// in place of whatever is there now. Returns the new record's sequence.
    pub async fn replace(&self, partition: u32, bucket: BucketId, record: Vec<u8>) -> Result<u64> {
        let now = self
            .get(partition, bucket)
            .await?
            .map_or(0, |stored| stored.seq);
        Ok(self.put(partition, bucket, record, now, None).await?)
    }

    /// The stored record of `bucket` of `partition` as stored, if any.
    pub async fn get(&self, partition: u32, bucket: BucketId) -> Result<Option<StoredRecord>> {
        let subject = self.subject(partition, bucket);
        match self.streams[bucket.0]
            .direct_get_last_for_subject(subject.clone())
            .await
        {
            Ok(msg) => Ok(Some(StoredRecord {
                marks: msg
                    .headers
                    .get(WRITE_HEADER)
                    .map(|v| WriteMarks::parse(v.as_str()))
                    .unwrap_or_default(),
                payload: msg.payload,
                seq: msg.sequence,
            })),
            Err(e) if e.kind() == stream::DirectGetErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("cannot read the usage record {subject}")),
        }
    }

    /// The stored records of `buckets` (starts, all of tier `tier`) of
    /// `partition`, as stored (read them with
    /// [`sluice_core::usage::visit_record`]); absent ones are left out.
    pub async fn read(
        &self,
        partition: u32,
        tier: usize,
        buckets: &[u64],
    ) -> Result<HashMap<u64, Bytes>> {
        let mut out = HashMap::with_capacity(buckets.len());
        if buckets.len() <= DIRECT_GETS {
            let gets = buckets.iter().map(|b| self.get(partition, (tier, *b)));
            for (b, record) in buckets.iter().zip(futures::future::join_all(gets).await) {
                if let Some(stored) = record? {
                    out.insert(*b, stored.payload);
                }
            }
            return Ok(out);
        }
        let first = buckets.iter().copied().min().unwrap_or(0);
        let wanted: std::collections::HashSet<u64> = buckets.iter().copied().collect();
        let prefix = usage_partition_prefix(&self.tiers[tier].name(), partition);
        let read = async {
            let start = first.saturating_sub(CLOCK_SLACK_MS);
            let start_time =
                time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(start) * 1_000_000)
                    .context("a usage range starts out of the calendar")?;
            let mut consumer = self.streams[tier]
                .create_consumer(consumer::pull::OrderedConfig {
                    filter_subject: format!("{prefix}*"),
                    deliver_policy: consumer::DeliverPolicy::ByStartTime { start_time },
                    ..Default::default()
                })
                .await
                .context("cannot read usage")?;
            let mut pending = consumer
                .info()
                .await
                .context("cannot read usage")?
                .num_pending;
            if pending == 0 {
                return Ok(());
            }
            let mut messages = consumer.messages().await.context("cannot read usage")?;
            while pending > 0 {
                let msg = messages
                    .next()
                    .await
                    .context("the usage stream ended early")?
                    .context("cannot read usage")?;
                pending = msg.info().map_err(|e| anyhow::anyhow!("{e}"))?.pending;
                let Some(bucket) = msg
                    .subject
                    .strip_prefix(prefix.as_str())
                    .and_then(|b| b.parse::<u64>().ok())
                else {
                    continue;
                };
                if wanted.contains(&bucket) {
                    out.insert(bucket, msg.payload.clone());
                }
            }
            anyhow::Ok(())
        };
        tokio::time::timeout(READ_TIMEOUT, read)
            .await
            .context("reading usage took too long")??;
        Ok(out)
    }
}
