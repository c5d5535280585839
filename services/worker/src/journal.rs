//! The journal (`durability = "journal"`): what was counted since the last
//! snapshot, so a new owner can replay it after a crash.
//!
//! Each worker appends to its own subject, `sluice.journal.w.<worker-id>`,
//! for all its partitions ([`crate::group_commit`] batches the appends);
//! every record names its partition. A partition's manifest says where
//! replay starts (a stream sequence: every record of the partition at or
//! below it is in the snapshot) and which workers may have appended records
//! of the partition since (`journal_writers`): the owners since that
//! snapshot. A new owner reads those subjects from that sequence and applies
//! the records of its partition.
//!
//! A replayed record is applied with `record` at its original time: it was
//! counted, so it is counted again regardless of the limit. Each record
//! carries the number of the turn that made it, and a snapshot the number
//! of the last turn its copy holds ([`crate::counters::Turns`]), so a
//! record the snapshot already holds is not applied again, wherever it
//! lies in the journal.
//!
//! Records are dropped once every partition's snapshot covers them
//! ([`purge_covered`]); the stream's `max_age` is only the backstop.

pub mod record;

use record::{Record, RecordRef};

use crate::snapshot;
use crate::store;
use anyhow::{Context as _, Result};
use async_nats::jetstream::{consumer, stream};
use futures::StreamExt;
use sluice_core::format;
use sluice_core::storage::journal_subject;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The most record bytes one journal message carries. A group commit under
/// heavy load can hold thousands of records; nats-server refuses messages
/// over its `max_payload` (1 MiB by default), so a bigger group is split
/// into several messages of at most about this size.
pub const MAX_APPEND: usize = 512 * 1024;

/// The headers of a journal message of `records`: its format
/// ([`format::FORMAT_HEADER`]), the oldest that holds them all.
fn format_headers(records: &[Record]) -> async_nats::HeaderMap {
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(
        format::FORMAT_HEADER,
        format_of(records).to_string().as_str(),
    );
    headers
}

/// The format of a journal message of `records`: [`format::JOURNAL`]
/// when any remembers an ask's id (SPEC §16), else
/// [`format::JOURNAL_TURNS`] when any was made in a numbered turn (every
/// record this release makes: [`crate::counters::Turns`]), which earlier
/// releases refuse instead of replaying what the snapshot holds twice. Otherwise (records
/// of an earlier release, in tests) the oldest that holds them all:
/// [`format::JOURNAL_COUNTS`] when every record is a count, else
/// [`format::JOURNAL_SLICES`], [`format::JOURNAL_HOLDS`] or
/// [`format::JOURNAL_USAGE`].
pub fn format_of(records: &[Record]) -> u32 {
    records
        .iter()
        .map(Record::format)
        .fold(format::JOURNAL_COUNTS, u32::max)
}

/// A journal message's payload. Format 6 ([`format::JOURNAL`]): an array
/// of groups `[turn, [record, ...]]`, one per run of records of one turn
/// (a turn's records are queued together, so a turn costs its number
/// once, not once per record). Earlier formats: an array of records.
pub fn encode(records: &[Record]) -> Result<Vec<u8>> {
    if format_of(records) < format::JOURNAL_TURNS {
        return Ok(rmp_serde::to_vec(records)?);
    }
    let groups: Vec<(u64, &[Record])> = records
        .chunk_by(|a, b| a.turn() == b.turn())
        .map(|group| (group[0].turn(), group))
        .collect();
    Ok(rmp_serde::to_vec(&groups)?)
}

/// The records of a journal message of format `version` ([`encode`]),
/// borrowing their strings from `payload`.
pub fn decode(
    version: u64,
    payload: &[u8],
) -> Result<Vec<RecordRef<'_>>, rmp_serde::decode::Error> {
    if version < u64::from(format::JOURNAL_TURNS) {
        return rmp_serde::from_slice(payload);
    }
    let groups: Vec<(u64, Vec<RecordRef<'_>>)> = rmp_serde::from_slice(payload)?;
    Ok(groups
        .into_iter()
        .flat_map(|(turn, records)| {
            records.into_iter().map(move |mut r| {
                r.set_turn(turn);
                r
            })
        })
        .collect())
}

/// A record's encoded size, at most ([`Record::encoded_len_bound`]),
/// plus, should it start a group of its own, the group's array headers
/// and turn.
fn encoded_len_bound(r: &Record) -> usize {
    r.encoded_len_bound() + 15
}

/// Appends `records` to `subject` as messages of at most [`MAX_APPEND`]
/// bytes each, all published before any ack is awaited. Returns the stream
/// sequence of the last one once every one is acknowledged.
pub async fn append(
    js: async_nats::jetstream::Context,
    subject: String,
    records: &[Record],
) -> Result<u64, String> {
    let mut acks = Vec::new();
    let mut start = 0;
    while start < records.len() {
        let mut end = start;
        let mut size = 5;
        while end < records.len()
            && (end == start || size + encoded_len_bound(&records[end]) <= MAX_APPEND)
        {
            size += encoded_len_bound(&records[end]);
            end += 1;
        }
        let payload = encode(&records[start..end]).map_err(|e| e.to_string())?;
        let ack = js
            .publish_with_headers(
                subject.clone(),
                format_headers(&records[start..end]),
                payload.into(),
            )
            .await
            .map_err(|e| e.to_string())?;
        acks.push(ack);
        start = end;
    }
    let mut last = 0;
    for ack in acks {
        last = ack.await.map_err(|e| e.to_string())?.sequence;
    }
    Ok(last)
}

/// What the journal held of some writers' subjects when it was last read,
/// by partition, kept a moment for the other partitions a takeover claims
/// at about the same time.
///
/// A dead worker's subject holds the records of all its partitions, and a
/// survivor takes those partitions over together; when each partition read
/// the whole tail to keep its own records, a takeover read it once per
/// partition (1.8–2.0 s for 32 partitions after heavy load,
/// docs/BENCHMARKS-HISTORY.md, "Restore after a crash"). Now the first
/// partition to need a subject reads it once, from the journal's first
/// record (every partition's replay starts
/// at or after it: the journal is purged only below what every snapshot
/// covers), up to its last record then; the others use what it read while
/// that still reaches the subject's last record (nothing was appended
/// since), and read it again otherwise. Reads of one subject are
/// serialized, so partitions claimed together wait for the first read
/// rather than repeat it. Tails are dropped once a takeover is over
/// ([`Tails::forget_unused`]).
///
/// Most of a dead writer's tail is usually covered by the snapshots already
/// (the journal is purged only every few snapshot intervals): after heavy
/// load, ~340,000 records were read to replay ~115,000. So each partition
/// of a takeover notes where its replay starts ([`Tails::replays_after`])
/// before any tail is read, and a read keeps only the records some
/// partition may replay: records are first decoded without copying their
/// strings ([`RecordRef`]), and only those kept are copied.
#[derive(Default)]
pub struct Tails {
    by_subject: tokio::sync::Mutex<HashMap<String, Arc<Tail>>>,
    /// Where each partition being taken over replays from, and since when.
    replay_starts: std::sync::Mutex<HashMap<u32, (u64, Instant)>>,
}

/// One subject's records, after `after` up to `upto` (stream sequences),
/// except those of a partition at or below its entry in `dropped_upto`.
struct Tail {
    after: u64,
    upto: u64,
    by_partition: HashMap<u32, Vec<(u64, Record)>>,
    dropped_upto: HashMap<u32, u64>,
    /// How many records the read decoded, kept or not, and how many of
    /// them were denials (journaled for usage only).
    records_read: usize,
    denials_read: usize,
    read_at: Instant,
}

impl Tail {
    /// Whether it holds every record of `partition` after `after_seq` up
    /// to `last`.
    fn serves(&self, partition: u32, after_seq: u64, last: u64) -> bool {
        self.after <= after_seq
            && self.upto >= last
            && self
                .dropped_upto
                .get(&partition)
                .is_none_or(|dropped| *dropped <= after_seq)
    }
}

/// How long a tail is kept after it was read: the partitions of one
/// takeover are claimed within a few hundred milliseconds.
const TAIL_KEPT: Duration = Duration::from_secs(10);

impl Tails {
    /// Drops the tails read, and the replay starts noted, more than
    /// [`TAIL_KEPT`] ago.
    pub fn forget_unused(&self) {
        if let Ok(mut tails) = self.by_subject.try_lock() {
            tails.retain(|_, tail| tail.read_at.elapsed() < TAIL_KEPT);
        }
        self.starts()
            .retain(|_, (_, noted)| noted.elapsed() < TAIL_KEPT);
    }

    fn starts(&self) -> std::sync::MutexGuard<'_, HashMap<u32, (u64, Instant)>> {
        self.replay_starts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes that `partition` replays the records after `after_seq`: a
    /// tail read from now on may drop its records at or below it.
    fn replays_after(&self, partition: u32, after_seq: u64) {
        self.starts().insert(partition, (after_seq, Instant::now()));
    }

    /// The records of `subject` that `partition` replays, after `after_seq`
    /// up to at least `last`, from a tail read earlier or read now.
    async fn tail(
        &self,
        journal: &stream::Stream,
        subject: &str,
        partition: u32,
        after_seq: u64,
        last: u64,
    ) -> Result<Arc<Tail>> {
        let entered = Instant::now();
        let mut tails = self.by_subject.lock().await;
        if let Some(tail) = tails.get(subject) {
            if tail.serves(partition, after_seq, last) {
                return Ok(tail.clone());
            }
        }
        let first = store::takeover_request("read the journal's state", journal.get_info())
            .await?
            .state
            .first_sequence;
        let after = after_seq.min(first.saturating_sub(1));
        let started = Instant::now();
        let tail = Arc::new(read(journal, subject, after, last, self).await?);
        tracing::debug!(
            subject,
            after,
            upto = last,
            records_read = tail.records_read,
            denials_read = tail.denials_read,
            records_kept = tail.by_partition.values().map(Vec::len).sum::<usize>(),
            waited_ms = (started - entered).as_millis() as u64,
            took_ms = started.elapsed().as_millis() as u64,
            "read a journal tail"
        );
        tails.insert(subject.to_string(), tail.clone());
        Ok(tail)
    }
}

/// Reads `subject`'s records after `after` up to `upto`, by partition,
/// without those no partition replays ([`Tails::replays_after`]).
async fn read(
    journal: &stream::Stream,
    subject: &str,
    after: u64,
    upto: u64,
    tails: &Tails,
) -> Result<Tail> {
    let mut tail = Tail {
        after,
        upto,
        by_partition: HashMap::new(),
        dropped_upto: HashMap::new(),
        records_read: 0,
        denials_read: 0,
        read_at: Instant::now(),
    };
    let consumer = store::takeover_request(
        "read the journal",
        journal.create_consumer(consumer::pull::OrderedConfig {
            filter_subject: subject.to_string(),
            deliver_policy: consumer::DeliverPolicy::ByStartSequence {
                start_sequence: after + 1,
            },
            ..Default::default()
        }),
    )
    .await?;
    let mut messages = store::takeover_request("read the journal", consumer.messages()).await?;
    let mut seq = after;
    while seq < upto {
        let next = async {
            match messages.next().await {
                Some(msg) => msg.map_err(anyhow::Error::from),
                None => Err(anyhow::anyhow!("the journal ended early")),
            }
        };
        let msg = store::takeover_request("read the journal", next).await?;
        seq = msg
            .info()
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .stream_sequence;
        let version = msg.headers.as_ref().map(|h| h.get(format::FORMAT_HEADER));
        let version = format::of_header(version.flatten().map(|v| v.as_str()));
        format::check(
            format::JOURNAL,
            || format!("journal message {seq} of {subject}"),
            version,
        )?;
        let records = match decode(version, &msg.payload) {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(subject, seq, "skipping an unreadable journal message: {e}");
                continue;
            }
        };
        tail.records_read += records.len();
        tail.denials_read += records
            .iter()
            .filter(|r| matches!(r.typed().kind, record::Kind::Denied { .. }))
            .count();
        let starts = tails.starts();
        for r in records {
            if let Some((replay_after, _)) = starts.get(&r.partition()) {
                if seq <= *replay_after {
                    let dropped = tail.dropped_upto.entry(r.partition()).or_default();
                    *dropped = (*dropped).max(*replay_after);
                    continue;
                }
            }
            tail.by_partition
                .entry(r.partition())
                .or_default()
                .push((seq, r.to_owned()));
        }
    }
    Ok(tail)
}

/// What the journal holds that a takeover replays: the tails of the
/// writers its manifest names, after its journal position. Read while the
/// snapshot is restored ([`read_since`]), applied after ([`Since::replay`]).
#[derive(Default)]
pub struct Since {
    after_seq: u64,
    tails: Vec<Arc<Tail>>,
}

/// Reads (or shares, [`Tails`]) the tails of `writers` after `after_seq`
/// that `partition` replays. Notes first where its replay starts, before
/// any tail is read ([`Tails::replays_after`]).
pub async fn read_since(
    journal: &stream::Stream,
    tails: &Tails,
    partition: u32,
    writers: &[String],
    after_seq: u64,
) -> Result<Since> {
    tails.replays_after(partition, after_seq);
    let mut since = Since {
        after_seq,
        tails: Vec::new(),
    };
    for writer in writers {
        let subject = journal_subject(writer);
        let last = store::takeover_request(
            "read the journal",
            journal.get_last_raw_message_by_subject(&subject),
        )
        .await;
        let last = match last {
            Ok(m) => m.sequence,
            Err(e)
                if e.downcast_ref::<stream::LastRawMessageError>()
                    .is_some_and(|e| {
                        e.kind() == stream::LastRawMessageErrorKind::NoMessageFound
                    }) =>
            {
                continue
            }
            Err(e) => return Err(e),
        };
        if last <= after_seq {
            continue;
        }
        since.tails.push(
            tails
                .tail(journal, &subject, partition, after_seq, last)
                .await?,
        );
    }
    Ok(since)
}

impl Since {
    /// Hands every record of `partition` and its stream sequence to
    /// `apply` (which says whether it was applied), in the order they were
    /// stored; returns how many were applied. The records are lent from the
    /// shared tails, not copied.
    pub fn replay(&self, partition: u32, mut apply: impl FnMut(u64, &Record) -> bool) -> usize {
        let mut records: Vec<&(u64, Record)> = self
            .tails
            .iter()
            .filter_map(|tail| tail.by_partition.get(&partition))
            .flatten()
            .filter(|(seq, _)| *seq > self.after_seq)
            .collect();
        // Owners of a partition follow one another, so the stream's order
        // is the order in which its records were counted (and reset).
        records.sort_by_key(|(seq, _)| *seq);
        records.iter().filter(|(seq, r)| apply(*seq, r)).count()
    }
}

/// Runs [`purge_covered`] every `every`, for ever (the worker aborts it).
pub async fn purge_covered_every(
    every: Duration,
    journal: stream::Stream,
    snapshots: async_nats::jetstream::kv::Store,
    partitions: u32,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(e) = purge_covered(&journal, &snapshots, partitions).await {
            tracing::warn!("{e:#}; will retry");
        }
    }
}

/// Drops the records every partition's snapshot covers: those at or below
/// the lowest journal position of the manifests. A partition with no
/// manifest has no records (an owner writes the manifest before it
/// answers). Any worker may run it; running it twice is harmless.
pub async fn purge_covered(
    journal: &stream::Stream,
    snapshots: &async_nats::jetstream::kv::Store,
    partitions: u32,
) -> Result<()> {
    let mut covered = None::<u64>;
    for partition in 0..partitions {
        if let (Some(m), _) = snapshot::read_manifest(snapshots, partition).await? {
            covered = Some(covered.map_or(m.journal_seq, |c| c.min(m.journal_seq)));
        }
    }
    match covered {
        Some(seq) if seq > 0 => {
            // Purges every message below `seq + 1`.
            journal
                .purge()
                .sequence(seq + 1)
                .await
                .context("cannot purge the journal")?;
            Ok(())
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(k: &str) -> Record {
        Record {
            n: 1,
            p: "default".into(),
            k: k.into(),
            c: 1,
            t: 5,
            r: false,
            d: false,
            s: false,
            g: 0,
            u: 0,
            h: None,
            e: 0,
            x: 0,
            v: 0,
            i: None,
            q: 0,
        }
    }

    /// Messages of counts stay in format 2, which the five-field records
    /// of earlier releases decode; a message holding any other record is
    /// format 3, because such a decoder fails on it (and, before format 3,
    /// skipped the whole message: its counts were lost to the takeover).
    #[test]
    fn only_messages_holding_more_than_counts_are_format_3_4_or_5_without_turns() {
        #[derive(serde::Deserialize)]
        #[allow(dead_code)]
        struct CountOfFormat2 {
            n: u32,
            p: String,
            k: String,
            c: u64,
            t: u64,
        }
        let counts = vec![count("a"), count("b")];
        assert_eq!(format_of(&counts), format::JOURNAL_COUNTS);
        let read: Vec<CountOfFormat2> = rmp_serde::from_slice(&encode(&counts).unwrap()).unwrap();
        assert_eq!(read.len(), 2);

        let reset = Record {
            r: true,
            c: 0,
            ..count("a")
        };
        let denial = Record {
            d: true,
            ..count("a")
        };
        let refund = Record {
            g: 3,
            u: 1,
            ..count("a")
        };
        for other in [reset, denial, refund.clone()] {
            let message = vec![count("b"), other];
            assert_eq!(format_of(&message), format::JOURNAL_SLICES);
            assert!(
                rmp_serde::from_slice::<Vec<CountOfFormat2>>(&encode(&message).unwrap()).is_err()
            );
        }
        assert_eq!(format::JOURNAL_SLICES, 3);

        // A hold's record makes its message format 4, which a reader of
        // format 3's ten fields refuses rather than misreads.
        let hold = Record {
            h: Some("0123456789abcdef0123456789abcdef".into()),
            e: 9,
            x: 1,
            ..refund
        };
        let message = vec![count("b"), hold.clone()];
        assert_eq!(format_of(&message), format::JOURNAL_HOLDS);
        assert_eq!(format::JOURNAL_HOLDS, 4);
        let encoded = encode(&message).unwrap();
        let read: Vec<RecordRef<'_>> = rmp_serde::from_slice(&encoded).unwrap();
        assert_eq!(read[1].to_owned(), hold);

        // A record whose usage is not its kind's (global limits) makes its
        // message format 5, which a reader of format 4's thirteen fields
        // refuses rather than misreads.
        #[derive(serde::Deserialize, Default)]
        #[serde(default)]
        #[allow(dead_code)]
        struct RecordOfFormat4 {
            n: u32,
            p: String,
            k: String,
            c: u64,
            t: u64,
            r: bool,
            d: bool,
            s: bool,
            g: u64,
            u: u64,
            h: Option<String>,
            e: u64,
            x: u8,
        }
        let format_4 = encode(&message).unwrap();
        assert!(rmp_serde::from_slice::<Vec<RecordOfFormat4>>(&format_4).is_ok());
        let not_usage = Record {
            v: record::NOT_USAGE,
            ..count("a")
        };
        let message = vec![count("b"), hold, not_usage.clone()];
        assert_eq!(format_of(&message), format::JOURNAL_USAGE);
        assert_eq!(format::JOURNAL_USAGE, 5);
        let encoded = encode(&message).unwrap();
        assert!(rmp_serde::from_slice::<Vec<RecordOfFormat4>>(&encoded).is_err());
        let read: Vec<RecordRef<'_>> = rmp_serde::from_slice(&encoded).unwrap();
        assert_eq!(read[2].to_owned(), not_usage);
    }

    /// Records made in numbered turns make their message format 6: groups
    /// of one turn's records under its number, which a reader of format 5's
    /// flat records refuses rather than misreads, and which reads back
    /// with every record's turn.
    #[test]
    fn records_of_numbered_turns_are_format_6_grouped_by_turn() {
        let in_turn = |k: &str, q: u64| Record { q, ..count(k) };
        let message = vec![
            in_turn("a", 7),
            in_turn("b", 7),
            Record {
                r: true,
                c: 0,
                ..in_turn("a", 9)
            },
            in_turn("c", 12),
        ];
        assert_eq!(format_of(&message), format::JOURNAL_TURNS);
        assert_eq!(format::JOURNAL_TURNS, 6);
        let encoded = encode(&message).unwrap();
        assert!(rmp_serde::from_slice::<Vec<RecordRef<'_>>>(&encoded).is_err());
        let groups: Vec<(u64, Vec<RecordRef<'_>>)> = rmp_serde::from_slice(&encoded).unwrap();
        let turns: Vec<(u64, usize)> = groups.iter().map(|(q, g)| (*q, g.len())).collect();
        assert_eq!(turns, [(7, 2), (9, 1), (12, 1)], "one group per turn");
        let read: Vec<Record> = decode(6, &encoded)
            .unwrap()
            .into_iter()
            .map(RecordRef::to_owned)
            .collect();
        assert_eq!(read, message);
        // Earlier formats still read as flat records, of no turn.
        let old = vec![count("a")];
        let encoded = encode(&old).unwrap();
        let read = decode(2, &encoded).unwrap();
        assert_eq!((read.len(), read[0].q), (1, 0));
    }

    #[test]
    fn records_read_without_copying_are_the_records_appended() {
        let records = vec![
            Record {
                n: 3,
                p: "login".into(),
                k: "alice".into(),
                c: 2,
                t: 1_700_000_000_000_000_000,
                r: false,
                d: false,
                s: false,
                g: 0,
                u: 0,
                h: None,
                e: 0,
                x: 0,
                v: 0,
                i: None,
                q: 0,
            },
            Record {
                n: 63,
                p: "default".into(),
                k: "bob%2Ebob".into(),
                c: 0,
                t: 7,
                r: true,
                d: false,
                s: false,
                g: 0,
                u: 0,
                h: None,
                e: 0,
                x: 0,
                v: 0,
                i: None,
                q: 0,
            },
            // A denial, journaled for its usage.
            Record {
                n: 5,
                p: "default".into(),
                k: "carol".into(),
                c: 3,
                t: 8,
                r: false,
                d: true,
                s: false,
                g: 0,
                u: 0,
                h: None,
                e: 0,
                x: 0,
                v: 0,
                i: None,
                q: 0,
            },
        ];
        let encoded = encode(&records).unwrap();
        let read: Vec<RecordRef<'_>> = rmp_serde::from_slice(&encoded).unwrap();
        let owned: Vec<Record> = read.into_iter().map(RecordRef::to_owned).collect();
        assert_eq!(owned, records);
    }
}
