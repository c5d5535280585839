//! A bucket's counts ranked ahead of time ([`RankedBucket`]) and the top N
//! over several of them by the threshold algorithm ([`top_of`]).
//!
//! Why: a top query summed every key of every bucket in its range, so with
//! a million keys counted in the last hour each query decoded, hashed and
//! summed a million entries (~100 ms of a worker's CPU per query;
//! docs/BENCHMARKS-HISTORY.md, "The dashboard"). A bucket that is final never
//! changes again: its keys can be sorted by count once and kept. The N
//! largest totals over several such lists are then found by Fagin's
//! threshold algorithm: read the lists in parallel by depth, get each newly
//! seen key's exact total over every list by random access, keep the N
//! best, and stop as soon as no key not yet seen can beat the N-th best:
//! its total is at most the sum of the counts at the lists' current depths
//! (the threshold). For a top 20 among a few hot keys that is after a few
//! hundred entries, not all of them.
//!
//! The answer is exactly [`super::top`]'s over the summed totals, ties
//! included: each list orders equal counts by key (then policy), as `top`
//! breaks ties, so a key not yet seen whose total could equal the
//! threshold sorts after every list's current key, and the stopping rule
//! takes that into account.

use super::counts::{By, Counts, TopFilter};
use super::record::{visit_record, RecordError};
use hashbrown::HashTable;
use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::hash::BuildHasher;

/// A `(key token, policy)` pair, as a top query ranks and breaks ties.
pub type KeyPolicy<'a> = (&'a str, &'a str);

/// One counted `(key, policy)` of a bucket: where its key starts in
/// [`RankedBucket::names`] (it ends where the next entry's starts), which
/// policy, its places in the two lists, and its counts. 32 bytes.
#[derive(Clone, Copy, Debug)]
struct Entry {
    key_start: u32,
    policy: u32,
    /// Its index in `by_used` and in `by_denied` ([`NOT_RANKED`] when the
    /// count is zero): whether a threshold walk has read it there yet.
    ranks: [u32; 2],
    counts: Counts,
}

/// The rank of an entry not in a list.
const NOT_RANKED: u32 = u32::MAX;

/// The counts of one bucket (of one partition), ranked by used and by
/// denied, with an index by key and policy. Built once from a stored
/// record ([`RankedBucket::from_record`]) or from counts in memory
/// ([`RankedBucket::from_counts`]).
pub struct RankedBucket {
    /// Every key's bytes, one after another.
    names: String,
    policies: Vec<Box<str>>,
    entries: Vec<Entry>,
    /// Entries with `used > 0`: by used, largest first, then by key and
    /// policy.
    by_used: Vec<u32>,
    /// The same for `denied`.
    by_denied: Vec<u32>,
    /// Entry indices by `(key, policy)`.
    index: HashTable<u32>,
    hasher: foldhash::fast::RandomState,
}

impl std::fmt::Debug for RankedBucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RankedBucket")
            .field("entries", &self.entries.len())
            .finish()
    }
}

impl RankedBucket {
    /// The counts of an encoded record ([`super::BucketRecord`]).
    pub fn from_record(bytes: &[u8]) -> Result<RankedBucket, RecordError> {
        let mut counts = Vec::new();
        visit_record(bytes, |policy, key, c| counts.push((policy, key, c)))?;
        Ok(RankedBucket::from_counts(counts))
    }

    /// `(policy, key, counts)`, a key as often as it comes (summed).
    pub fn from_counts<'a>(
        counts: impl IntoIterator<Item = (&'a str, &'a str, Counts)>,
    ) -> RankedBucket {
        let counts = counts.into_iter();
        let mut bucket = RankedBucket {
            names: String::new(),
            policies: Vec::new(),
            entries: Vec::with_capacity(counts.size_hint().0),
            by_used: Vec::new(),
            by_denied: Vec::new(),
            index: HashTable::new(),
            hasher: foldhash::fast::RandomState::default(),
        };
        // Sized up front: a record's keys are known before the index is
        // built, so it never grows.
        bucket.index.reserve(counts.size_hint().0, |_| 0);
        for (policy, key, c) in counts {
            bucket.add(policy, key, c);
        }
        bucket.rank();
        bucket
    }

    fn hash(&self, (key, policy): KeyPolicy<'_>) -> u64 {
        self.hasher.hash_one((key, policy))
    }

    fn add(&mut self, policy: &str, key: &str, c: Counts) {
        if c.is_zero() {
            return;
        }
        let hash = self.hash((key, policy));
        let RankedBucket {
            names,
            policies,
            entries,
            index,
            hasher,
            ..
        } = self;
        let same = |&i: &u32| entry_key(names, policies, entries, i as usize) == (key, policy);
        if let Some(&i) = index.find(hash, same) {
            entries[i as usize].counts.add(c);
            return;
        }
        let policy = match policies.iter().position(|p| **p == *policy) {
            Some(i) => i as u32,
            None => {
                policies.push(policy.into());
                (policies.len() - 1) as u32
            }
        };
        let entry = Entry {
            key_start: names.len() as u32,
            policy,
            ranks: [NOT_RANKED; 2],
            counts: c,
        };
        names.push_str(key);
        entries.push(entry);
        let i = (entries.len() - 1) as u32;
        index.insert_unique(hash, i, |&j| {
            hasher.hash_one(entry_key(names, policies, entries, j as usize))
        });
    }

    /// Sorts the lists: by key and policy first (a record with one policy
    /// already is), then by count, stably.
    fn rank(&mut self) {
        let mut order: Vec<u32> = (0..self.entries.len() as u32).collect();
        let key = |i: &u32| self.key(*i as usize);
        if !order.is_sorted_by(|a, b| key(a) <= key(b)) {
            order.sort_unstable_by(|a, b| key(a).cmp(&key(b)));
        }
        for by in [By::Used, By::Denied] {
            let mut list: Vec<u32> = order
                .iter()
                .copied()
                .filter(|&i| self.entries[i as usize].counts.of(by) > 0)
                .collect();
            list.sort_by_key(|&i| Reverse(self.entries[i as usize].counts.of(by)));
            list.shrink_to_fit();
            for (rank, &i) in list.iter().enumerate() {
                self.entries[i as usize].ranks[by as usize] = rank as u32;
            }
            match by {
                By::Used => self.by_used = list,
                By::Denied => self.by_denied = list,
            }
        }
        self.names.shrink_to_fit();
        self.entries.shrink_to_fit();
        self.index.shrink_to_fit(|&j| {
            hash_of(&self.hasher, &self.names, &self.policies, &self.entries, j)
        });
    }

    fn key(&self, i: usize) -> KeyPolicy<'_> {
        entry_key(&self.names, &self.policies, &self.entries, i)
    }

    fn find(&self, key: KeyPolicy<'_>) -> Option<&Entry> {
        let hash = self.hash(key);
        self.index
            .find(hash, |&i| self.key(i as usize) == key)
            .map(|&i| &self.entries[i as usize])
    }

    /// The counts of `key` under `policy` (zero when absent).
    pub fn counts(&self, key: &str, policy: &str) -> Counts {
        self.find((key, policy))
            .map_or_else(Counts::default, |e| e.counts)
    }

    /// How many `(key, policy)` pairs with a count it holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Roughly the bytes it holds on the heap (a cache's bound counts these).
    pub fn heap_bytes(&self) -> usize {
        self.names.capacity()
            + self.policies.iter().map(|p| p.len() + 16).sum::<usize>()
            + self.entries.capacity() * std::mem::size_of::<Entry>()
            + (self.by_used.capacity() + self.by_denied.capacity()) * 4
            + self.index.capacity() * (std::mem::size_of::<u32>() + 1)
    }

    fn list(&self, by: By) -> &[u32] {
        match by {
            By::Used => &self.by_used,
            By::Denied => &self.by_denied,
        }
    }

    /// The entry at `depth` of the list by `by`: its key and policy, and
    /// its counts.
    fn at(&self, by: By, depth: usize) -> Option<(KeyPolicy<'_>, Counts)> {
        let &i = self.list(by).get(depth)?;
        Some((self.key(i as usize), self.entries[i as usize].counts))
    }
}

fn entry_key<'a>(
    names: &'a str,
    policies: &'a [Box<str>],
    entries: &[Entry],
    i: usize,
) -> KeyPolicy<'a> {
    let start = entries[i].key_start as usize;
    let end = entries
        .get(i + 1)
        .map_or(names.len(), |e| e.key_start as usize);
    (&names[start..end], &policies[entries[i].policy as usize])
}

fn hash_of(
    hasher: &foldhash::fast::RandomState,
    names: &str,
    policies: &[Box<str>],
    entries: &[Entry],
    i: u32,
) -> u64 {
    hasher.hash_one(entry_key(names, policies, entries, i as usize))
}

/// A key kept among the best so far, ordered so that the largest is the
/// worst (smallest count, then largest key): the top of a max-heap is the
/// one to drop.
#[derive(PartialEq, Eq)]
struct Candidate<'a> {
    count: u64,
    key: KeyPolicy<'a>,
    counts: Counts,
}

impl Ord for Candidate<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .count
            .cmp(&self.count)
            .then_with(|| self.key.cmp(&other.key))
    }
}

impl PartialOrd for Candidate<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// How far [`top_of`] read: for tests and the worker's metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TopStats {
    /// Entries read from the lists in order.
    pub read: usize,
    /// Keys whose totals were summed by random access.
    pub summed: usize,
}

/// The `n` `(key, policy)` pairs with the largest totals by `by` over
/// `buckets` (each pair's total is the sum of its counts in every bucket),
/// only those `filter` wants; exactly what [`super::top`] answers
/// over the summed totals, ties by key then policy. Stops reading as soon
/// as no pair not yet seen can make the first `n` (threshold algorithm).
///
/// A pair read in one list is looked up in the others, where its rank
/// says whether it was read there already (then it was summed then); one
/// whose total cannot beat the N-th best even with the other lists' next
/// counts is not looked up at all (it never will be: the N-th best only
/// gets better).
pub fn top_of<'a>(
    buckets: &[&'a RankedBucket],
    n: usize,
    by: By,
    filter: TopFilter<'_>,
) -> (Vec<(KeyPolicy<'a>, Counts)>, TopStats) {
    let mut stats = TopStats::default();
    let buckets: Vec<&'a RankedBucket> =
        buckets.iter().copied().filter(|b| !b.is_empty()).collect();
    let mut kept: BinaryHeap<Candidate<'a>> = BinaryHeap::with_capacity(n + 1);
    if n == 0 {
        return (Vec::new(), stats);
    }
    let wanted = |(k, p): KeyPolicy<'_>| filter.wants(k, p);
    let mut depth = vec![0usize; buckets.len()];
    let mut next = vec![0u64; buckets.len()];
    loop {
        // The next wanted entry of each list: its count bounds what any
        // pair not yet read there has there.
        let mut last_key: Option<KeyPolicy<'a>> = None;
        for ((b, d), next) in buckets.iter().zip(depth.iter_mut()).zip(next.iter_mut()) {
            *next = 0;
            while let Some((key, counts)) = b.at(by, *d) {
                if wanted(key) {
                    *next = counts.of(by);
                    last_key = last_key.max(Some(key));
                    break;
                }
                *d += 1;
            }
        }
        let threshold = next.iter().fold(0u64, |t, c| t.saturating_add(*c));
        let Some(last_key) = last_key else {
            break; // every list read to its end
        };
        let worst = (kept.len() == n).then(|| kept.peek().expect("n > 0 kept"));
        // A pair not yet seen has a total of at most the threshold, and one
        // equal to it only if it has each list's next count there, so it
        // sorts after each list's next key.
        if worst.is_some_and(|w| w.count > threshold || (w.count == threshold && w.key < last_key))
        {
            break;
        }
        for i in 0..buckets.len() {
            let Some((key, counts)) = buckets[i].at(by, depth[i]) else {
                continue;
            };
            depth[i] += 1;
            stats.read += 1;
            if let Some(worst) = kept.peek().filter(|_| kept.len() == n) {
                let others = threshold - next[i];
                let bound = counts.of(by).saturating_add(others);
                if bound < worst.count || (bound == worst.count && key > worst.key) {
                    continue;
                }
            }
            let Some(total) = total(&buckets, i, &depth, by, key, counts) else {
                continue; // read in another list before: summed then
            };
            stats.summed += 1;
            let candidate = Candidate {
                count: total.of(by),
                key,
                counts: total,
            };
            if kept.len() < n {
                kept.push(candidate);
            } else if candidate < *kept.peek().expect("n > 0 kept") {
                kept.pop();
                kept.push(candidate);
            }
        }
    }
    // Ascending by Candidate's order is best first.
    let ranked = kept
        .into_sorted_vec()
        .into_iter()
        .map(|k| (k.key, k.counts))
        .collect();
    (ranked, stats)
}

/// The total of `key`, just read in list `i` with `counts`, over every
/// list; `None` when another list has read it already.
fn total(
    buckets: &[&RankedBucket],
    i: usize,
    depth: &[usize],
    by: By,
    key: KeyPolicy<'_>,
    counts: Counts,
) -> Option<Counts> {
    let mut total = counts;
    for (j, other) in buckets.iter().enumerate() {
        if j == i {
            continue;
        }
        if let Some(e) = other.find(key) {
            if (e.ranks[by as usize] as usize) < depth[j] {
                return None;
            }
            total.add(e.counts);
        }
    }
    Some(total)
}

#[cfg(test)]
mod tests;
