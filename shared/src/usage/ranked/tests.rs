use super::*;
use crate::usage::{top, RecordSum, TopFilter};
use proptest::prelude::*;
use std::collections::BTreeMap;

/// Every key ranked.
const ALL: TopFilter<'static> = TopFilter {
    policy: None,
    group: None,
};

fn policy(policy: &str) -> TopFilter<'_> {
    TopFilter {
        policy: Some(policy),
        group: None,
    }
}

fn c(used: u64, denied: u64) -> Counts {
    Counts { used, denied }
}

/// `(policy, key, counts)` per bucket, as owned strings.
type Buckets = Vec<Vec<(String, String, Counts)>>;

fn ranked(buckets: &Buckets) -> Vec<RankedBucket> {
    buckets
        .iter()
        .map(|b| RankedBucket::from_counts(b.iter().map(|(p, k, c)| (p.as_str(), k.as_str(), *c))))
        .collect()
}

/// What a top query answered before lists: every total summed, then
/// [`top`].
fn brute_force(
    buckets: &Buckets,
    n: usize,
    by: By,
    filter: TopFilter<'_>,
) -> Vec<((String, String), Counts)> {
    let mut totals: BTreeMap<(String, String), Counts> = BTreeMap::new();
    for (p, k, c) in buckets.iter().flatten() {
        if filter.wants(k, p) {
            totals.entry((k.clone(), p.clone())).or_default().add(*c);
        }
    }
    top(totals, n, by)
}

fn owned(ranked: Vec<(KeyPolicy<'_>, Counts)>) -> Vec<((String, String), Counts)> {
    ranked
        .into_iter()
        .map(|((k, p), c)| ((k.to_string(), p.to_string()), c))
        .collect()
}

fn bucket(entries: &[(&str, &str, Counts)]) -> Vec<(String, String, Counts)> {
    entries
        .iter()
        .map(|(p, k, c)| (p.to_string(), k.to_string(), *c))
        .collect()
}

#[test]
fn totals_are_summed_over_buckets_and_ranked_with_ties_by_key_then_policy() {
    let buckets = vec![
        bucket(&[
            ("default", "b", c(5, 0)),
            ("default", "a", c(2, 9)),
            ("login", "a", c(3, 0)),
        ]),
        bucket(&[("default", "a", c(3, 1)), ("default", "c", c(4, 0))]),
    ];
    let lists = ranked(&buckets);
    let refs: Vec<&RankedBucket> = lists.iter().collect();
    let (got, _) = top_of(&refs, 10, By::Used, ALL);
    let want = [
        (("a", "default"), c(5, 10)),
        (("b", "default"), c(5, 0)),
        (("c", "default"), c(4, 0)),
        (("a", "login"), c(3, 0)),
    ];
    assert_eq!(got, want);
    let (got, _) = top_of(&refs, 1, By::Denied, policy("login"));
    assert!(got.is_empty(), "login has no denials: {got:?}");
    let (got, _) = top_of(&refs, 2, By::Used, policy("login"));
    assert_eq!(got, [(("a", "login"), c(3, 0))]);
    assert_eq!(lists[0].counts("a", "default"), c(2, 9));
    assert_eq!(lists[0].counts("a", "nope"), Counts::default());
}

#[test]
fn a_groups_top_ranks_its_members_and_not_its_own_key_or_others() {
    let buckets = vec![
        bucket(&[
            ("org", "acme", c(9, 1)),
            ("user", "acme.alice", c(2, 0)),
            ("user", "acme.eng.bob", c(3, 1)),
            ("user", "acmeco.carol", c(5, 0)),
        ]),
        bucket(&[
            ("team", "acme.eng", c(3, 1)),
            ("user", "acme.alice", c(2, 0)),
        ]),
    ];
    let lists = ranked(&buckets);
    let refs: Vec<&RankedBucket> = lists.iter().collect();
    let acme = TopFilter {
        policy: None,
        group: Some("acme"),
    };
    let (got, _) = top_of(&refs, 10, By::Used, acme);
    let want = [
        (("acme.alice", "user"), c(4, 0)),
        (("acme.eng", "team"), c(3, 1)),
        (("acme.eng.bob", "user"), c(3, 1)),
    ];
    assert_eq!(got, want);
    let users = TopFilter {
        policy: Some("user"),
        ..acme
    };
    let (got, _) = top_of(&refs, 1, By::Denied, users);
    assert_eq!(got, [(("acme.eng.bob", "user"), c(3, 1))]);
}

#[test]
fn a_record_is_ranked_as_its_counts_are() {
    let mut record = RecordSum::new(0);
    record.add_counts("default", "x", c(1, 2));
    record.add_counts("default", "y", c(7, 0));
    record.add_counts("b", "x", c(3, 3));
    let list = RankedBucket::from_record(&record.encode()).unwrap();
    assert_eq!(list.len(), 3);
    let (got, _) = top_of(&[&list], 3, By::Used, ALL);
    assert_eq!(
        got,
        [
            (("y", "default"), c(7, 0)),
            (("x", "b"), c(3, 3)),
            (("x", "default"), c(1, 2))
        ]
    );
    assert!(RankedBucket::from_record(b"\xc1").is_err());
}

#[test]
fn a_few_hot_keys_among_many_are_found_after_reading_few_entries() {
    // 60 buckets of 2,000 keys counted once each, and 10 hot keys counted
    // in every bucket: the top 5 need a few rounds, not 120,000 entries.
    let buckets: Buckets = (0..60)
        .map(|b| {
            let mut entries: Vec<(String, String, Counts)> = (0..2000)
                .map(|k| ("default".into(), format!("cold-{b}-{k}"), c(1, 0)))
                .collect();
            entries.extend((0..10).map(|h| ("default".into(), format!("hot-{h}"), c(100 + h, 0))));
            entries
        })
        .collect();
    let lists = ranked(&buckets);
    let refs: Vec<&RankedBucket> = lists.iter().collect();
    let (got, stats) = top_of(&refs, 5, By::Used, ALL);
    assert_eq!(owned(got), brute_force(&buckets, 5, By::Used, ALL));
    assert!(stats.read <= 60 * 10, "read {} entries", stats.read);
    assert_eq!(
        stats.summed, 5,
        "hot-9 to hot-5, then the threshold is below the 5th"
    );
}

#[test]
fn equal_counts_in_one_list_stop_at_the_nth_key() {
    // Ties everywhere: the first n keys in key order, after reading n.
    let buckets: Buckets = vec![(0..10_000)
        .map(|k| ("default".into(), format!("k{k:05}"), c(1, 0)))
        .collect()];
    let lists = ranked(&buckets);
    let (got, stats) = top_of(&[&lists[0]], 100, By::Used, ALL);
    assert_eq!(owned(got), brute_force(&buckets, 100, By::Used, ALL));
    assert!(stats.read <= 101, "read {} entries", stats.read);
}

#[test]
fn nothing_is_ranked_from_nothing() {
    let empty = RankedBucket::from_counts([]);
    assert!(empty.is_empty());
    assert_eq!(top_of(&[&empty], 5, By::Used, ALL).0, []);
    assert_eq!(top_of(&[], 5, By::Used, ALL).0, []);
    let one = RankedBucket::from_counts([("p", "k", c(1, 0))]);
    assert_eq!(top_of(&[&one], 0, By::Used, ALL).0, []);
    // Zero counts are not entries; a key counted twice is summed.
    let summed = RankedBucket::from_counts([
        ("p", "k", c(1, 0)),
        ("p", "z", c(0, 0)),
        ("p", "k", c(2, 5)),
    ]);
    assert_eq!(summed.len(), 1);
    assert_eq!(summed.counts("k", "p"), c(3, 5));
}

fn arb_buckets() -> impl Strategy<Value = Buckets> {
    // Few keys, policies and small counts: many ties and many keys in
    // several buckets. Plain keys, a group's own keys (`g0`) and its
    // members of two and three tokens (`g0.k4`, `g1.t.k5`).
    let key = |k: usize| match k % 4 {
        0 => format!("k{k}"),
        1 => format!("g{}", k % 2),
        2 => format!("g{}.k{k}", k % 2),
        _ => format!("g{}.t.k{k}", k % 2),
    };
    let entry = (0..3usize, 0..25usize, 0..4u64, 0..3u64).prop_map(move |(p, k, used, denied)| {
        (["a", "b", "c"][p].to_string(), key(k), c(used, denied))
    });
    proptest::collection::vec(proptest::collection::vec(entry, 0..40), 0..6)
}

proptest! {
    #[test]
    fn the_threshold_algorithm_answers_what_summing_everything_does(
        buckets in arb_buckets(),
        n in 1usize..30,
        denied in any::<bool>(),
        policy in proptest::option::of(0..4usize),
        group in proptest::option::of(0..3usize),
    ) {
        let by = if denied { By::Denied } else { By::Used };
        let filter = TopFilter {
            policy: policy.map(|p| ["a", "b", "c", "none"][p]),
            group: group.map(|g| ["g0", "g1", "k4"][g]),
        };
        let lists = ranked(&buckets);
        let refs: Vec<&RankedBucket> = lists.iter().collect();
        let (got, _) = top_of(&refs, n, by, filter);
        prop_assert_eq!(owned(got), brute_force(&buckets, n, by, filter));
    }
}

#[test]
fn a_key_in_several_lists_is_summed_once() {
    // Three lists of the same 1,000 keys, all tied: nothing stops the walk
    // early, but each key's total is summed once, when it is first read.
    let one: Vec<(String, String, Counts)> = (0..1000)
        .map(|k| ("default".into(), format!("k{k:04}"), c(1, 0)))
        .collect();
    let buckets: Buckets = vec![one.clone(), one.clone(), one];
    let lists = ranked(&buckets);
    let refs: Vec<&RankedBucket> = lists.iter().collect();
    let (got, stats) = top_of(&refs, 10, By::Used, ALL);
    assert_eq!(owned(got), brute_force(&buckets, 10, By::Used, ALL));
    assert!(stats.summed <= 1000, "summed {}", stats.summed);
}
