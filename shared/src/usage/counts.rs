//! What a key used and was denied ([`Counts`]), the count a ranking reads
//! ([`By`]), and the top-N merge over totals ([`top`]): the numbers every
//! record holds and every query answers with.

use serde::{Deserialize, Serialize};

/// What a key used and was denied, in units.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "(u64, u64)", into = "(u64, u64)")]
pub struct Counts {
    /// Units consumed: by allowed asks and by hits.
    pub used: u64,
    /// Units of denied asks.
    pub denied: u64,
}

impl From<(u64, u64)> for Counts {
    fn from((used, denied): (u64, u64)) -> Counts {
        Counts { used, denied }
    }
}

impl From<Counts> for (u64, u64) {
    fn from(c: Counts) -> (u64, u64) {
        (c.used, c.denied)
    }
}

impl Counts {
    pub fn add(&mut self, other: Counts) {
        self.used = self.used.saturating_add(other.used);
        self.denied = self.denied.saturating_add(other.denied);
    }

    pub fn is_zero(&self) -> bool {
        self.used == 0 && self.denied == 0
    }

    /// The count a top query ranks by.
    pub fn of(&self, by: By) -> u64 {
        match by {
            By::Used => self.used,
            By::Denied => self.denied,
        }
    }
}

/// Which count a top query ranks by.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum By {
    #[default]
    Used,
    Denied,
}

/// Which keys a top query ranks (SPEC §9, §17): those under `policy`,
/// and the members of `group` (keys whose first token is the group's and
/// which have more: `acme.alice`, `acme.eng.alice`, not `acme` itself;
/// [`crate::key::group_of`]); `None` is every one. The default ranks
/// every key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TopFilter<'a> {
    pub policy: Option<&'a str>,
    pub group: Option<&'a str>,
}

impl TopFilter<'_> {
    /// Whether the key whose token is `key` under `policy` is ranked.
    pub fn wants(&self, key: &str, policy: &str) -> bool {
        self.policy.is_none_or(|want| want == policy)
            && self
                .group
                .is_none_or(|group| crate::key::group_of(key) == Some(group))
    }
}

/// The `n` largest of `totals` by `by` (ties by key, so the answer does not
/// depend on the order totals come in); zero totals are left out.
pub fn top<K: Ord + Clone>(
    totals: impl IntoIterator<Item = (K, Counts)>,
    n: usize,
    by: By,
) -> Vec<(K, Counts)> {
    let mut all: Vec<(K, Counts)> = totals.into_iter().filter(|(_, c)| c.of(by) > 0).collect();
    let order = |(ka, a): &(K, Counts), (kb, b): &(K, Counts)| {
        b.of(by).cmp(&a.of(by)).then_with(|| ka.cmp(kb))
    };
    // The n first in order, then only those sorted: a partition may hold
    // far more keys than are asked for.
    if n < all.len() {
        all.select_nth_unstable_by(n, order);
        all.truncate(n);
    }
    all.sort_by(order);
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_ranks_by_the_chosen_count_and_breaks_ties_by_key() {
        let c = |used, denied| Counts { used, denied };
        let totals = vec![
            ("b", c(5, 0)),
            ("a", c(5, 9)),
            ("c", c(7, 1)),
            ("d", c(0, 0)),
        ];
        let by_used: Vec<&str> = top(totals.clone(), 3, By::Used)
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(by_used, ["c", "a", "b"]);
        let by_denied: Vec<&str> = top(totals, 10, By::Denied)
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(by_denied, ["a", "c"]);
    }

    #[test]
    fn a_groups_filter_takes_its_members_only() {
        let acme = TopFilter {
            policy: None,
            group: Some("acme"),
        };
        assert!(acme.wants("acme.alice", "user"));
        assert!(acme.wants("acme.eng.alice", "user"));
        assert!(acme.wants("acme.eng", "team"));
        assert!(!acme.wants("acme", "org"), "the group's own key");
        assert!(!acme.wants("acmeco.alice", "user"));
        assert!(!acme.wants("acme%2Ealice", "user"));
        let users = TopFilter {
            policy: Some("user"),
            ..acme
        };
        assert!(users.wants("acme.alice", "user") && !users.wants("acme.eng", "team"));
        assert!(TopFilter::default().wants("anything", "any"));
    }

    #[test]
    fn the_first_n_are_those_of_a_full_sort() {
        // Many ties, so that the order of equal counts is what is checked.
        let totals: Vec<(u32, Counts)> = (0..500u32)
            .map(|k| {
                let used = u64::from(k.wrapping_mul(2_654_435_761) % 17);
                (k, Counts { used, denied: 0 })
            })
            .collect();
        let mut sorted: Vec<(u32, Counts)> =
            totals.iter().copied().filter(|(_, c)| c.used > 0).collect();
        sorted.sort_by(|(ka, a), (kb, b)| b.used.cmp(&a.used).then_with(|| ka.cmp(kb)));
        for n in [0, 1, 7, 100, 470, 500, 1000] {
            let want: Vec<_> = sorted.iter().copied().take(n).collect();
            assert_eq!(top(totals.clone(), n, By::Used), want, "n = {n}");
        }
    }
}
