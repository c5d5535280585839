use super::*;
use sluice_core::ask::counter_key;
use sluice_core::policy::{Algorithm, Limit};
use std::cell::Cell;

thread_local! {
    /// How long `apply` stalls between finding the bucket and writing to
    /// it: a thread the OS did not run for a while.
    pub(super) static STALL_AFTER_LOOKUP: Cell<Duration> = const { Cell::new(Duration::ZERO) };
}

/// A decision whose thread stalls after taking its bucket from the
/// look-aside, past the bucket's moka deadline, must still leave its
/// count where the next decision finds it. (Seen under a load average
/// of 6 on 2 cores in `decisions_match_a_map_that_never_forgets_...`:
/// the end-of-decision check used the clock read before the stall, so
/// the bucket moka had expired was not inserted again and the next
/// decision started the key afresh.)
#[test]
fn a_stall_past_the_bucket_deadline_loses_no_count() {
    let policy = Policy::new(
        "default",
        Algorithm::FixedWindow,
        vec![Limit::new(2, Duration::from_millis(100), None).unwrap()],
    )
    .unwrap();
    let counters = Counters::with_min_idle_ttl(Duration::from_millis(1));
    let now = Nanos::from_secs(1_000);
    let key = "default/stalled";
    assert!(counters.apply(&policy, key, now, Op::Allow(1)).allowed);
    // The bucket's moka ttl is at most 125 ms (the window and a
    // quarter); the second decision takes it from the look-aside and
    // then stalls past that, in the same window of logical time.
    STALL_AFTER_LOOKUP.with(|s| s.set(Duration::from_millis(300)));
    assert!(counters.apply(&policy, key, now, Op::Allow(1)).allowed);
    STALL_AFTER_LOOKUP.with(|s| s.set(Duration::ZERO));
    let third = counters.apply(&policy, key, now, Op::Allow(1));
    assert!(
        !third.allowed,
        "two were counted in this window of 2; the stalled one was lost: {third:?}"
    );
}

const SEC: u64 = 1_000_000_000;

/// The stored idle ttl of the bucket holding `key`, if the cache holds
/// it (read without `get`, which would restart the bucket's expiry).
fn stored_ttl(counters: &Counters, key: &str) -> Option<u64> {
    let id = counters.bucket_of(key);
    counters
        .buckets
        .iter()
        .find(|(k, _)| **k == id)
        .map(|(_, bucket)| bucket.idle_ttl_ns())
}

/// `n` keys of the builtin policy that share `key`'s bucket.
fn neighbours(counters: &Counters, key: &str, n: usize) -> Vec<String> {
    let bucket = counters.bucket_of(key);
    let mut buf = String::new();
    (0..)
        .map(|i| {
            counter_key(&mut buf, "default", &format!("n-{i}"));
            buf.clone()
        })
        .filter(|k| counters.bucket_of(k) == bucket)
        .take(n)
        .collect()
}

#[test]
fn a_peek_or_a_denial_on_a_fresh_key_stores_nothing() {
    let policy = Policy::builtin_default();
    let counters = Counters::new();
    counters.apply(&policy, "default/a", Nanos::from_secs(100), Op::Allow(0));
    assert_eq!(stored_ttl(&counters, "default/a"), None);
    assert_eq!(counters.len(), 0);
}

#[test]
fn the_stored_ttl_covers_the_need_and_only_grows_when_the_need_outgrows_it() {
    // 15 per second, sliding window: a counted key matters until the end
    // of the window after its own.
    let policy = Policy::builtin_default();
    let counters = Counters::with_min_idle_ttl(Duration::ZERO);
    let key = "default/a";
    // Counted late in the window [100 s, 101 s): needed until 102 s.
    counters.apply(&policy, key, Nanos(100 * SEC + 9 * SEC / 10), Op::Allow(1));
    let first = stored_ttl(&counters, key).expect("a counted key is stored");
    assert_eq!(
        first,
        (11 * SEC / 10) * 5 / 4,
        "1.1 s needed, plus a quarter"
    );

    // Counted at the start of the next window: needed until 103 s, 2 s,
    // more than stored, so the ttl grows, with slack.
    counters.apply(&policy, key, Nanos(101 * SEC), Op::Allow(1));
    let grown = stored_ttl(&counters, key).unwrap();
    assert_eq!(grown, 2 * SEC + SEC / 2);

    // Later the need shrinks (1.5 s, then 1.9 s in the window after):
    // covered, so the ttl stays and the bucket is not re-inserted.
    counters.apply(&policy, key, Nanos(101 * SEC + SEC / 2), Op::Allow(1));
    assert_eq!(stored_ttl(&counters, key), Some(grown));
    counters.apply(&policy, key, Nanos(102 * SEC + SEC / 10), Op::Allow(1));
    assert_eq!(stored_ttl(&counters, key), Some(grown));
}

#[test]
fn a_bucket_of_short_lived_keys_is_kept_for_the_minimum_idle_ttl() {
    // GCRA at 100/s: a key that took one may be forgotten ~10 ms later.
    use sluice_core::policy::{Algorithm, Limit};
    let limits = vec![Limit::new(100, Duration::from_secs(1), None).unwrap()];
    let policy = Policy::new("fast", Algorithm::Gcra, limits).unwrap();
    let now = Nanos::from_secs(100);
    let unfloored = Counters::with_min_idle_ttl(Duration::ZERO);
    unfloored.apply(&policy, "fast/a", now, Op::Allow(1));
    let need = stored_ttl(&unfloored, "fast/a").unwrap();
    assert!(need < SEC / 10, "the key's own need is short: {need} ns");
    // By default its bucket stays for the minimum, so that the next
    // request for any of its keys finds it instead of building it anew.
    let counters = Counters::new();
    counters.apply(&policy, "fast/a", now, Op::Allow(1));
    assert_eq!(
        stored_ttl(&counters, "fast/a"),
        Some(MIN_IDLE_TTL.as_nanos() as u64)
    );
}

#[test]
fn keys_sharing_a_bucket_keep_their_own_counts() {
    // 15 per second: each of the neighbours takes 15, then is denied,
    // whatever the others did.
    let policy = Policy::builtin_default();
    let counters = Counters::new();
    let keys = neighbours(&counters, "default/a", 20);
    let now = Nanos::from_secs(100);
    for round in 0..16 {
        for key in &keys {
            let decision = counters.apply(&policy, key, now, Op::Allow(1));
            assert_eq!(decision.allowed, round < 15, "{key} in round {round}");
        }
    }
    assert_eq!(counters.len(), 20);
    // The bucket's ttl covers the need of every key in it (until 102 s).
    assert!(stored_ttl(&counters, &keys[0]).unwrap() >= 2 * SEC);
}

#[test]
fn a_bucket_in_use_forgets_its_idle_keys_and_lowers_its_ttl() {
    let policy = Policy::builtin_default();
    let counters = Counters::with_min_idle_ttl(Duration::ZERO);
    let keys = neighbours(&counters, "default/a", 3);
    // Counted at 100 s: each needed until 102 s.
    for key in &keys {
        counters.apply(&policy, key, Nanos::from_secs(100), Op::Allow(1));
    }
    assert_eq!(counters.len(), 3);
    let before = stored_ttl(&counters, &keys[0]).unwrap();

    assert_eq!(before, 2 * SEC + SEC / 2);

    // At 200 s the first is peeked at: all three have been forgettable
    // for long, so the bucket drops them, and its ttl falls to zero.
    counters.apply(&policy, &keys[0], Nanos::from_secs(200), Op::Allow(0));
    assert_eq!(counters.len(), 0, "a peek on a stale key leaves no need");
    assert_eq!(stored_ttl(&counters, &keys[0]), Some(0));

    // Counted again, the key is stored again and the ttl covers it.
    counters.apply(&policy, &keys[1], Nanos::from_secs(300), Op::Allow(1));
    let mut left = Vec::new();
    counters.for_each(|key, _| left.push(key.to_string()));
    assert_eq!(left, vec![keys[1].clone()]);
    assert_eq!(stored_ttl(&counters, &keys[1]), Some(before));
}

#[test]
fn a_prune_keeps_the_keys_that_still_matter() {
    // Prunes drop only slots whose state equals a fresh one.
    let policy = Policy::builtin_default();
    let counters = Counters::new();
    let keys = neighbours(&counters, "default/a", 2);
    // keys[1] counted at 100 s: needed until 102 s. keys[0] takes all 15
    // at 101.9 s: needed until 103 s.
    counters.apply(&policy, &keys[1], Nanos::from_secs(100), Op::Allow(1));
    let late = Nanos(101 * SEC + 9 * SEC / 10);
    for _ in 0..15 {
        assert!(
            counters
                .apply(&policy, &keys[0], late, Op::Allow(1))
                .allowed
        );
    }
    // At 102.05 s a peek at keys[1] prunes the bucket: keys[1] goes,
    // keys[0] stays and still weighs 95 % of its 15.
    let t = Nanos(102 * SEC + SEC / 20);
    counters.apply(&policy, &keys[1], t, Op::Allow(0));
    let mut left = Vec::new();
    counters.for_each(|key, _| left.push(key.to_string()));
    assert_eq!(left, vec![keys[0].clone()]);
    let fresh = counters.apply(&policy, &keys[1], t, Op::Allow(0));
    let kept = counters.apply(&policy, &keys[0], t, Op::Allow(0));
    assert_eq!(fresh.remaining, 15);
    assert!(kept.remaining <= 1, "remaining {}", kept.remaining);
}

#[test]
fn decisions_match_a_map_that_never_forgets_while_moka_expires_buckets() {
    // Limits of a few milliseconds, so that while this runs real time
    // crosses bucket deadlines: moka expires idle buckets, the
    // look-aside goes stale, buckets are read again, refreshed and
    // re-inserted, slots are pruned. Policy time is real time, as in the
    // worker. Forgetting may only drop a state that equals a fresh one,
    // so every decision must equal that of a map that forgets nothing.
    use sluice_core::policy::{Algorithm, Limit};
    let algorithms = [
        Algorithm::FixedWindow,
        Algorithm::SlidingLog,
        Algorithm::SlidingWindow,
        Algorithm::TokenBucket,
        Algorithm::Gcra,
    ];
    for algorithm in algorithms {
        let limits = vec![
            Limit::new(3, Duration::from_millis(4), None).unwrap(),
            Limit::new(5, Duration::from_millis(15), None).unwrap(),
        ];
        let policy = Policy::new("default", algorithm, limits).unwrap();
        let counters = Counters::with_min_idle_ttl(Duration::ZERO);
        // Three groups of keys, two of them sharing one bucket each,
        // asked in turn: 7 ms each (a bucket comes back 14 ms later,
        // inside its moka ttl of ~20 ms but maybe past the deadline the
        // look-aside knows), then, every other 200 ms, 40 ms each (idle
        // long enough for moka to expire the bucket).
        let mut keys = neighbours(&counters, "default/a", 3);
        keys.extend(neighbours(&counters, "default/b", 3));
        keys.extend(["default/c1", "default/c2", "default/c3"].map(String::from));
        let mut reference: HashMap<String, KeyState> = HashMap::new();
        let start = Instant::now();
        let base = Nanos::from_secs(1_000_000);
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut ops = 0u64;
        while ops < 1_000_000 && (ops < 5_000 || start.elapsed() < Duration::from_millis(600)) {
            ops += 1;
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let r = seed >> 33;
            let ms = start.elapsed().as_millis();
            let turn = if (ms / 200).is_multiple_of(2) { 7 } else { 40 };
            let group = (ms / turn % 3) as usize;
            let key = &keys[group * 3 + (r % 3) as usize];
            let op = match r % 10 {
                0 => Op::Allow(0),
                1 => Op::Record(2),
                _ => Op::Allow(1),
            };
            let now = base.saturating_add(Nanos::from(start.elapsed()));
            let got = counters.apply(&policy, key, now, op);
            let state = reference
                .entry(key.clone())
                .or_insert_with(|| policy.new_state());
            let want = op.apply(&policy, state, now);
            assert_eq!(got, want, "{algorithm:?}, op {ops} {op:?} on {key}");
            // What still matters is in moka, where a snapshot reads it
            // (`iter` does not move moka's expiry, as `get` would): if
            // the key is live after the look, the look must have found it.
            let hash = counters.hash(key.as_bytes());
            let id = Counters::bucket_of_hash(hash);
            let in_moka = counters
                .buckets
                .iter()
                .any(|(k, bucket)| *k == id && bucket.lock().table.find(hash, key).is_some());
            let after = base.saturating_add(Nanos::from(start.elapsed()));
            if !in_moka && policy.idle_expiry(state, after) > Nanos::ZERO {
                panic!("{algorithm:?}, op {ops}: {key} is live but not in moka");
            }
        }
    }
}

/// `n` distinct counter keys of the builtin policy named `prefix-<i>`.
fn keys(prefix: &str, n: usize) -> Vec<String> {
    let mut buf = String::new();
    (0..n)
        .map(|i| {
            counter_key(&mut buf, "default", &format!("{prefix}-{i}"));
            buf.clone()
        })
        .collect()
}

#[test]
fn a_flood_of_new_keys_stays_within_the_bound_and_spares_keys_asked_again() {
    // One partition; a bound of 32 keys per bucket on average, room
    // for the 500 users. Buckets are kept for an hour: policy time
    // stands still here while real time passes, and moka expires
    // buckets in real time.
    let max = 32 * BUCKETS;
    let bound = KeyBound::new(max);
    let counters = Counters::with(bound.clone(), Duration::from_secs(3600));
    let policy = Policy::builtin_default();
    let now = Nanos::from_secs(100);
    let users = keys("user", 500);
    for user in &users {
        for _ in 0..2 {
            assert!(counters.apply(&policy, user, now, Op::Allow(1)).allowed);
        }
    }
    // Twenty times the bound in new keys, each counted once.
    let flood = keys("flood", 20 * max as usize);
    for (i, key) in flood.iter().enumerate() {
        counters.apply(&policy, key, now, Op::Allow(1));
        assert!(
            bound.held() <= max + 1,
            "{} held after {i} flood keys, bound {max}",
            bound.held()
        );
    }
    assert_eq!(bound.held(), counters.len(), "held counts what is stored");
    assert!(
        bound.held() >= max - 1,
        "the bound is used: {}",
        bound.held()
    );
    assert_eq!(bound.evicted(), 500 + flood.len() as u64 - bound.held());
    // Every user kept the two it took: 13 of 15 left.
    let lost: Vec<&String> = users
        .iter()
        .filter(|user| counters.apply(&policy, user, now, Op::Allow(0)).remaining != 13)
        .collect();
    assert!(lost.is_empty(), "{} users forgotten: {lost:?}", lost.len());
    drop(counters);
    assert_eq!(bound.held(), 0, "dropped counters release their keys");
}

#[test]
fn a_bound_far_below_the_buckets_still_holds_and_spares_keys_asked_again() {
    // 50 keys over 2 × 64 buckets: most buckets are empty.
    let bound = KeyBound::new(50);
    let long = Duration::from_secs(3600);
    let partitions = [
        Counters::with(bound.clone(), long),
        Counters::with(bound.clone(), long),
    ];
    let policy = Policy::builtin_default();
    let now = Nanos::from_secs(100);
    let users = keys("user", 10);
    for (i, user) in users.iter().enumerate() {
        for _ in 0..2 {
            partitions[i % 2].apply(&policy, user, now, Op::Allow(1));
        }
    }
    for (i, key) in keys("flood", 2_000).iter().enumerate() {
        partitions[i % 2].apply(&policy, key, now, Op::Allow(1));
        assert!(bound.held() <= 51, "{} held", bound.held());
    }
    for (i, user) in users.iter().enumerate() {
        let peek = partitions[i % 2].apply(&policy, user, now, Op::Allow(0));
        assert_eq!(peek.remaining, 13, "{user} was forgotten");
    }
}

#[test]
fn the_least_valuable_slot_goes_first() {
    // A bucket of keys asked once and again, at different times: the
    // first to go is asked once and counted earliest, then the other
    // asked once, then the one asked again counted earliest. A token
    // bucket of 100 an hour: a key that took one is needed for 36 s from
    // when it took it, so keys counted a second apart rank apart.
    let limits = vec![Limit::new(100, Duration::from_secs(3600), None).unwrap()];
    let policy = Policy::new("default", Algorithm::TokenBucket, limits).unwrap();
    let bound = KeyBound::new(4);
    let counters = Counters::within(bound.clone());
    let keys = neighbours(&counters, "default/a", 7);
    let at = |s: u64| Nanos::from_secs(100 + s);
    counters.apply(&policy, &keys[0], at(0), Op::Allow(1)); // again, early
    counters.apply(&policy, &keys[0], at(0), Op::Allow(1));
    counters.apply(&policy, &keys[1], at(1), Op::Allow(1)); // once, early
    counters.apply(&policy, &keys[2], at(2), Op::Allow(1)); // once, later
    counters.apply(&policy, &keys[3], at(3), Op::Allow(1)); // again, later
    counters.apply(&policy, &keys[3], at(3), Op::Allow(1));
    // The keys (by index) that are live after `key` is counted at `t`.
    let count_then_live = |key: usize, t: u64| {
        counters.apply(&policy, &keys[key], at(t), Op::Allow(1));
        let mut live: Vec<usize> = Vec::new();
        counters.for_each(|k, _| live.extend(keys.iter().position(|key| key == k)));
        live.sort();
        live
    };
    assert_eq!(count_then_live(4, 4), [0, 2, 3, 4]);
    assert_eq!(count_then_live(5, 5), [0, 3, 4, 5]);
    // keys[4] and [5] are asked once: they go before the ones asked again.
    assert_eq!(count_then_live(6, 6), [0, 3, 5, 6]);
    assert_eq!((bound.held(), bound.evicted()), (4, 3));
}

#[test]
fn a_partition_restored_at_the_bound_gets_its_share() {
    let max = 4 * BUCKETS;
    let bound = KeyBound::new(max);
    let policy = Policy::builtin_default();
    let now = Nanos::from_secs(100);
    let old = Counters::with(bound.clone(), Duration::from_secs(3600));
    for key in keys("old", 2 * max as usize) {
        old.apply(&policy, &key, now, Op::Allow(1));
    }
    assert!(bound.held() <= max + 1);
    let entries: Vec<Entry> = keys("restored", max as usize)
        .into_iter()
        .map(|key| {
            let mut state = policy.new_state();
            Op::Allow(1).apply(&policy, &mut state, now);
            Entry { key, state }
        })
        .collect();
    let restored = Counters::with(bound.clone(), Duration::from_secs(3600));
    restored.import(entries, now, |_, _| Some(&policy));
    // Two partitions share the bound: each ends near half of it.
    let (a, b) = (old.len(), restored.len());
    assert!(bound.held() <= max + 1, "{} held", bound.held());
    assert_eq!(a + b, bound.held());
    assert!(b >= max * 2 / 5, "the restored partition kept {b} of {max}");
    assert!(a >= max * 2 / 5, "the old partition kept {a} of {max}");
}

#[test]
fn import_restores_live_entries_and_drops_stale_ones() {
    let policy = Policy::builtin_default();
    let source = Counters::new();
    let now = Nanos::from_secs(100);
    let mut buf = String::new();
    for i in 0..500 {
        counter_key(&mut buf, "default", &format!("user-{i}"));
        for _ in 0..15 {
            source.apply(&policy, &buf, now, Op::Allow(1));
        }
    }
    let mut entries = Vec::new();
    source.for_each(|key, state| {
        entries.push(Entry {
            key: key.to_string(),
            state: state.clone(),
        })
    });
    entries.push(Entry {
        key: "gone-policy/user-1".to_string(),
        state: policy.new_state(),
    });

    let restored = Counters::new();
    let kept = restored.import(entries, now, |name, _| {
        (name == policy.name()).then_some(&policy)
    });
    assert_eq!((kept, restored.len()), (500, 500));
    counter_key(&mut buf, "default", "user-7");
    assert!(!restored.apply(&policy, &buf, now, Op::Allow(1)).allowed);

    // Much later, everything restored is stale.
    let mut entries = Vec::new();
    source.for_each(|key, state| {
        entries.push(Entry {
            key: key.to_string(),
            state: state.clone(),
        })
    });
    let late = Counters::new();
    let kept = late.import(entries, Nanos::from_secs(1_000), |_, _| Some(&policy));
    assert_eq!((kept, late.len()), (0, 0));
}
