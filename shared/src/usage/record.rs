//! The record one partition's bucket of one tier is stored as
//! ([`BucketRecord`]), read whole or visited without being built
//! ([`visit_record`]), and continued by adding what an owner counted since
//! its last write ([`add_to_record`], [`RecordSum`]). `crate::usage` says
//! why a record holds a partition and absolute counts.

use super::counts::Counts;
use crate::format::{self, NewerFormat};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One partition's usage in one bucket of one tier, as stored: by policy,
/// then by key token. ([`RecordSum`] writes the same bytes from borrowed
/// counts.)
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketRecord {
    /// Format ([`format::USAGE`]).
    pub v: u32,
    /// Journal mode: the journal's stream sequence up to which every record
    /// of the partition is in these counts (a new owner replaying the
    /// journal adds only what is past it). 0 otherwise.
    pub w: u64,
    pub keys: BTreeMap<String, BTreeMap<String, Counts>>,
}

/// Why a stored record cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error(transparent)]
    Newer(#[from] NewerFormat),
    #[error(
        "a usage record that is not one ({0}); was it written by something other than sluice?"
    )]
    Malformed(String),
}

impl BucketRecord {
    pub fn encode(&self) -> Vec<u8> {
        rmp_serde::to_vec_named(self).expect("a usage record always encodes")
    }

    pub fn decode(bytes: &[u8]) -> Result<BucketRecord, RecordError> {
        #[derive(Deserialize)]
        struct Version {
            v: u32,
        }
        let version: Version =
            rmp_serde::from_slice(bytes).map_err(|e| RecordError::Malformed(e.to_string()))?;
        format::check(
            format::USAGE,
            || "a usage record".to_string(),
            u64::from(version.v),
        )?;
        rmp_serde::from_slice(bytes).map_err(|e| RecordError::Malformed(e.to_string()))
    }

    /// The counts of one key under one policy (zero when absent).
    pub fn counts(&self, policy: &str, key: &str) -> Counts {
        self.keys
            .get(policy)
            .and_then(|keys| keys.get(key))
            .copied()
            .unwrap_or_default()
    }
}

/// Hands every `(policy, key, counts)` of an encoded [`BucketRecord`] to
/// `f`, without building the record: a query over a month reads hundreds
/// of records with thousands of keys each, and wants one key (or a sum).
/// The format is checked first (`v` leads the map, as
/// [`BucketRecord::encode`] writes it). Returns the record's watermark
/// (`w`).
pub fn visit_record<'a>(
    bytes: &'a [u8],
    mut f: impl FnMut(&'a str, &'a str, Counts),
) -> Result<u64, RecordError> {
    use crate::wire::msgpack::{Reader, Value};
    let malformed = |what: &str| RecordError::Malformed(what.to_string());
    let mut r = Reader::new(bytes);
    let mut next = move || r.next().map_err(|e| malformed(e.sentence()));
    let Value::Map(fields) = next()? else {
        return Err(malformed("not a map"));
    };
    let mut versioned = false;
    let mut watermark = 0;
    for _ in 0..fields {
        let field = match next()? {
            Value::Str(s) => s,
            _ => return Err(malformed("a field name that is not a string")),
        };
        match (field, versioned) {
            ("v", false) => {
                let Value::Uint(v) = next()? else {
                    return Err(malformed("v is not a number"));
                };
                format::check(format::USAGE, || "a usage record".to_string(), v)?;
                versioned = true;
            }
            ("w", true) => {
                let Value::Uint(w) = next()? else {
                    return Err(malformed("w is not a number"));
                };
                watermark = w;
            }
            ("keys", true) => {
                let Value::Map(policies) = next()? else {
                    return Err(malformed("keys is not a map"));
                };
                for _ in 0..policies {
                    let (Value::Str(policy), Value::Map(keys)) = (next()?, next()?) else {
                        return Err(malformed("a policy's keys are not a map"));
                    };
                    for _ in 0..keys {
                        let (
                            Value::Str(key),
                            Value::Array(2),
                            Value::Uint(used),
                            Value::Uint(denied),
                        ) = (next()?, next()?, next()?, next()?)
                        else {
                            return Err(malformed("a key's counts are not [used, denied]"));
                        };
                        f(policy, key, Counts { used, denied });
                    }
                }
            }
            _ => return Err(malformed("an unexpected field, or no format version first")),
        }
    }
    Ok(watermark)
}

/// A sum of counts borrowed from encoded records and from memory, to be
/// encoded as one record (a rollup, or a stored minute plus what its owner
/// counted since): no string is copied.
///
/// The counts are gathered in one vector and sorted once when encoded, not
/// kept in a map as they come: a stored record is already in key order, so
/// that sort is one merge pass with the few keys added to it, and a rollup
/// merges its finer records' runs. A map's insert per key (a search of
/// string compares down the tree) made a flush of a minute of 30,000 keys
/// the answering thread's largest cost in a flood of new keys
/// (docs/BENCHMARKS-HISTORY.md, "A flood of new keys at the default
/// `max_keys`").
#[derive(Debug)]
pub struct RecordSum<'a> {
    w: u64,
    entries: Vec<(&'a str, &'a str, Counts)>,
}

impl<'a> RecordSum<'a> {
    /// An empty sum with watermark `w`.
    pub fn new(w: u64) -> Self {
        RecordSum {
            w,
            entries: Vec::new(),
        }
    }

    pub fn add_counts(&mut self, policy: &'a str, key: &'a str, counts: Counts) {
        self.entries.push((policy, key, counts));
    }

    /// Adds every count of an encoded record and keeps the larger watermark.
    pub fn add_encoded(&mut self, bytes: &'a [u8]) -> Result<(), RecordError> {
        let entries = &mut self.entries;
        let w = visit_record(bytes, |policy, key, counts| {
            entries.push((policy, key, counts))
        })?;
        self.w = self.w.max(w);
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The record, encoded as [`BucketRecord::encode`] encodes the same
    /// counts.
    pub fn encode(mut self) -> Vec<u8> {
        // Stable and adaptive: runs already in order are merged, not sorted.
        self.entries.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        self.entries.dedup_by(|next, kept| {
            let same = (next.0, next.1) == (kept.0, kept.1);
            if same {
                kept.2.add(next.2);
            }
            same
        });
        let policies: Vec<&[(&str, &str, Counts)]> =
            self.entries.chunk_by(|a, b| a.0 == b.0).collect();
        let record = SortedRecord {
            v: format::USAGE,
            w: self.w,
            keys: Policies(&policies),
        };
        rmp_serde::to_vec_named(&record).expect("a usage record always encodes")
    }
}

/// A record's fields as [`BucketRecord`] has them, over sorted counts
/// with no key twice: serialized the same way, without building the maps.
#[derive(Serialize)]
struct SortedRecord<'s, 'a> {
    v: u32,
    w: u64,
    keys: Policies<'s, 'a>,
}

/// Counts grouped by policy, each group sorted by key.
struct Policies<'s, 'a>(&'s [&'s [(&'a str, &'a str, Counts)]]);

/// One policy's counts, sorted by key.
struct Keys<'s, 'a>(&'s [(&'a str, &'a str, Counts)]);

impl Serialize for Policies<'_, '_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|group| (group[0].0, Keys(group))))
    }
}

impl Serialize for Keys<'_, '_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|(_, key, counts)| (key, counts)))
    }
}

/// The record holding the counts of `stored` (an encoded record; `None`:
/// nothing stored yet) plus every count of `more`, encoded, with the larger
/// of the two watermarks. The stored keys are borrowed, not copied: an
/// owner adds what it counted since its last write to a record of every
/// key of the partition's minute.
pub fn add_to_record<'a>(
    stored: Option<&'a [u8]>,
    w: u64,
    more: impl IntoIterator<Item = (&'a str, &'a str, Counts)>,
) -> Result<Vec<u8>, RecordError> {
    let mut sum = RecordSum::new(w);
    if let Some(bytes) = stored {
        sum.add_encoded(bytes)?;
    }
    for (policy, key, counts) in more {
        sum.add_counts(policy, key, counts);
    }
    Ok(sum.encode())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_and_a_newer_one_is_refused() {
        let mut r = BucketRecord {
            v: format::USAGE,
            w: 7,
            ..Default::default()
        };
        r.keys
            .entry("default".into())
            .or_default()
            .insert("alice".into(), Counts { used: 3, denied: 1 });
        let back = BucketRecord::decode(&r.encode()).unwrap();
        assert_eq!(back, r);
        assert_eq!(
            back.counts("default", "alice"),
            Counts { used: 3, denied: 1 }
        );
        assert_eq!(back.counts("default", "bob"), Counts::default());
        r.v = format::USAGE + 1;
        assert!(matches!(
            BucketRecord::decode(&r.encode()),
            Err(RecordError::Newer(_))
        ));
        assert!(matches!(
            BucketRecord::decode(b"\xc1"),
            Err(RecordError::Malformed(_))
        ));
    }

    #[test]
    fn a_visit_sees_what_decoding_sees_and_refuses_the_same() {
        let mut r = BucketRecord {
            v: format::USAGE,
            w: 3,
            ..Default::default()
        };
        for (policy, key, used, denied) in [
            ("a", "k1", 1, 0),
            ("a", "k2", 300, 7),
            ("b", "k1", u64::MAX, 1),
        ] {
            r.keys
                .entry(policy.into())
                .or_default()
                .insert(key.into(), Counts { used, denied });
        }
        let mut seen = Vec::new();
        let bytes = r.encode();
        let w = visit_record(&bytes, |p, k, c| {
            seen.push((p.to_string(), k.to_string(), c))
        })
        .unwrap();
        assert_eq!(w, 3);
        let want: Vec<_> = r
            .keys
            .iter()
            .flat_map(|(p, keys)| keys.iter().map(move |(k, c)| (p.clone(), k.clone(), *c)))
            .collect();
        assert_eq!(seen, want);
        r.v = format::USAGE + 1;
        assert!(matches!(
            visit_record(&r.encode(), |_, _, _| {}),
            Err(RecordError::Newer(_))
        ));
        for bad in [&b"\xc1"[..], b"\x81\xa4keys\x80", b"\x91\x01"] {
            assert!(
                matches!(
                    visit_record(bad, |_, _, _| {}),
                    Err(RecordError::Malformed(_))
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn adding_to_a_record_sums_every_key_and_keeps_the_larger_watermark() {
        let c = |used, denied| Counts { used, denied };
        let mut stored = BucketRecord {
            v: format::USAGE,
            w: 9,
            ..Default::default()
        };
        for (policy, key, counts) in [
            ("a", "k1", c(1, 0)),
            ("a", "k2", c(3, 2)),
            ("b", "k1", c(5, 0)),
        ] {
            stored
                .keys
                .entry(policy.into())
                .or_default()
                .insert(key.into(), counts);
        }
        let bytes = stored.encode();
        let more = [
            ("a", "k2", c(1, 1)),
            ("a", "k3", c(2, 0)),
            ("c", "k1", c(0, 4)),
        ];
        let sum = BucketRecord::decode(&add_to_record(Some(&bytes), 4, more).unwrap()).unwrap();
        assert_eq!(sum.w, 9);
        assert_eq!(sum.counts("a", "k1"), c(1, 0));
        assert_eq!(sum.counts("a", "k2"), c(4, 3));
        assert_eq!(sum.counts("a", "k3"), c(2, 0));
        assert_eq!(sum.counts("b", "k1"), c(5, 0));
        assert_eq!(sum.counts("c", "k1"), c(0, 4));
        assert_eq!(sum.keys.values().map(|k| k.len()).sum::<usize>(), 5);
        // Nothing stored: the counts alone, with our watermark.
        let alone = BucketRecord::decode(&add_to_record(None, 4, more).unwrap()).unwrap();
        assert_eq!((alone.w, alone.counts("a", "k2")), (4, c(1, 1)));
        // A stored record that cannot be read is an error, not a zero.
        assert!(add_to_record(Some(b"\xc1"), 4, more).is_err());
        stored.v = format::USAGE + 1;
        assert!(matches!(
            add_to_record(Some(&stored.encode()), 4, more),
            Err(RecordError::Newer(_))
        ));
    }

    proptest::proptest! {
        /// Records of random keys (some shared, several policies, keys
        /// added twice, additions out of order): the sum's bytes must be
        /// those of the record a map of the summed counts encodes to.
        #[test]
        fn a_sum_encodes_as_the_record_of_the_same_counts_would(
            records in proptest::collection::vec(
                (0..100u64, proptest::collection::vec((0..3usize, 0..300u32, 0..1000u64, 0..3u64), 0..200)),
                0..4,
            ),
            more in proptest::collection::vec((0..2usize, 0..300u32, 0..2u64), 0..50),
            w in 0..100u64,
        ) {
            let key = |i: u32| format!("k{}", i * 7919 % 1000);
            let mut want = BucketRecord { v: format::USAGE, w, ..Default::default() };
            let mut encoded = Vec::new();
            for (record_w, entries) in &records {
                let mut record = BucketRecord { v: format::USAGE, w: *record_w, ..Default::default() };
                for &(policy, k, used, denied) in entries {
                    let policy = ["api", "b", "login"][policy];
                    record.keys.entry(policy.into()).or_default().insert(key(k), Counts { used, denied });
                }
                want.w = want.w.max(record.w);
                for (policy, keys) in &record.keys {
                    for (k, counts) in keys {
                        want.keys.entry(policy.clone()).or_default().entry(k.clone()).or_default().add(*counts);
                    }
                }
                encoded.push(record.encode());
            }
            let more: Vec<(&str, String, Counts)> = more
                .iter()
                .map(|&(policy, k, denied)| (["api", "zz"][policy], key(k), Counts { used: 1, denied }))
                .collect();
            let mut sum = RecordSum::new(w);
            for bytes in &encoded {
                sum.add_encoded(bytes).unwrap();
            }
            for (policy, k, counts) in &more {
                sum.add_counts(policy, k, *counts);
                want.keys.entry(policy.to_string()).or_default().entry(k.clone()).or_default().add(*counts);
            }
            proptest::prop_assert_eq!(sum.encode(), want.encode());
        }
    }
}
