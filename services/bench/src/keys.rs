//! Which key each request asks for: uniform, Zipf, or each key once in order;
//! optionally with a few hot keys that get a fixed share of all asks.
//!
//! Keys are numbered `0..K`; the load generator turns a number into a subject
//! or a key string prepared up front, so choosing a key costs a random number
//! and (for Zipf) a binary search, nothing else.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// How keys are drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dist {
    /// Every key equally likely.
    Uniform,
    /// Key `i` (0-based rank) with probability proportional to `1 / (i+1)^s`.
    Zipf,
    /// Keys in order `0, 1, 2, ...` across all tasks (wrapping at K): with
    /// `--requests K`, every key exactly once (to fill a worker with K keys).
    Seq,
}

/// A shared, read-only description of the key space.
#[derive(Clone)]
pub struct Keys {
    n: u64,
    kind: Kind,
}

#[derive(Clone)]
enum Kind {
    Uniform,
    /// The cumulative distribution, `cdf[i]` = P(rank <= i); last is 1.
    Zipf(Arc<Vec<f64>>),
    Seq(Arc<AtomicU64>),
    /// Keys `0..hot` get `share` of the asks (uniform among them), the
    /// other keys the rest (uniform among them).
    Hot {
        hot: u64,
        share: f64,
    },
}

impl Keys {
    pub fn new(n: u64, dist: Dist, zipf_s: f64) -> Keys {
        assert!(n > 0, "at least one key");
        let kind = match dist {
            Dist::Uniform => Kind::Uniform,
            Dist::Seq => Kind::Seq(Arc::new(AtomicU64::new(0))),
            Dist::Zipf => {
                let mut cdf = Vec::with_capacity(n as usize);
                let mut sum = 0.0;
                for i in 0..n {
                    sum += 1.0 / ((i + 1) as f64).powf(zipf_s);
                    cdf.push(sum);
                }
                for c in cdf.iter_mut() {
                    *c /= sum;
                }
                *cdf.last_mut().expect("n > 0") = 1.0;
                Kind::Zipf(Arc::new(cdf))
            }
        };
        Keys { n, kind }
    }

    /// Uniform keys, except that the first `hot` of the `n` keys get
    /// `share` of all asks between them; the other `n - hot` keys share the
    /// rest evenly. `hot` must be below `n` and `share` within `0..=1`.
    pub fn hot(n: u64, hot: u64, share: f64) -> Keys {
        assert!(0 < hot && hot < n, "hot keys are some of the keys, not all");
        assert!((0.0..=1.0).contains(&share), "a share is within 0..=1");
        Keys {
            n,
            kind: Kind::Hot { hot, share },
        }
    }

    /// The next key number, in `0..len()`.
    pub fn next(&self, rng: &mut Rng) -> usize {
        match &self.kind {
            Kind::Uniform => rng.below(self.n) as usize,
            Kind::Seq(next) => (next.fetch_add(1, Ordering::Relaxed) % self.n) as usize,
            Kind::Zipf(cdf) => {
                let u = rng.unit();
                cdf.partition_point(|&c| c < u).min(cdf.len() - 1)
            }
            Kind::Hot { hot, share } => {
                if rng.unit() <= *share {
                    rng.below(*hot) as usize
                } else {
                    (hot + rng.below(self.n - hot)) as usize
                }
            }
        }
    }

    /// The share of all requests that go to the most popular key.
    #[cfg(test)]
    pub fn top_share(&self) -> f64 {
        match &self.kind {
            Kind::Zipf(cdf) => cdf[0],
            _ => 1.0 / self.n as f64,
        }
    }
}

/// SplitMix64: small, fast, and good enough to pick keys.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (Lemire's multiply-shift; the bias is below 2^-32 for n < 2^32).
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// Uniform in `(0, 1]`.
    pub fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_covers_every_key_evenly() {
        let keys = Keys::new(10, Dist::Uniform, 1.0);
        let mut rng = Rng::new(1);
        let mut seen = [0u32; 10];
        for _ in 0..100_000 {
            seen[keys.next(&mut rng)] += 1;
        }
        for n in seen {
            assert!((9_000..11_000).contains(&n), "{seen:?}");
        }
    }

    #[test]
    fn zipf_follows_one_over_rank() {
        let keys = Keys::new(1000, Dist::Zipf, 1.0);
        let mut rng = Rng::new(2);
        let mut seen = vec![0u32; 1000];
        for _ in 0..200_000 {
            seen[keys.next(&mut rng)] += 1;
        }
        // H(1000) = 7.485: the top key gets 13.4 %, the second half as much.
        let top = seen[0] as f64 / 200_000.0;
        assert!((top - 1.0 / 7.485).abs() < 0.005, "top share {top}");
        assert!((keys.top_share() - 1.0 / 7.485).abs() < 1e-3);
        let ratio = seen[0] as f64 / seen[1] as f64;
        assert!((1.85..2.15).contains(&ratio), "rank 1 / rank 2 = {ratio}");
        assert!(seen.iter().all(|&n| n < seen[0] + 1));
    }

    #[test]
    fn hot_keys_get_their_share_and_the_rest_is_uniform() {
        let keys = Keys::hot(1000, 10, 0.5);
        let mut rng = Rng::new(5);
        let mut seen = vec![0u32; 1000];
        let n = 400_000;
        for _ in 0..n {
            seen[keys.next(&mut rng)] += 1;
        }
        let hot: u32 = seen[..10].iter().sum();
        let share = hot as f64 / n as f64;
        assert!((share - 0.5).abs() < 0.005, "hot share {share}");
        // Each hot key ~20,000; each other key ~202.
        for &k in &seen[..10] {
            assert!((18_500..21_500).contains(&k), "{:?}", &seen[..10]);
        }
        let cold = &seen[10..];
        assert!(cold.iter().all(|&k| (120..300).contains(&k)), "{cold:?}");
        assert_eq!(cold.iter().sum::<u32>(), n - hot);
    }

    #[test]
    fn hot_share_zero_and_one_are_the_two_extremes() {
        let mut rng = Rng::new(6);
        let all_hot = Keys::hot(100, 3, 1.0);
        let no_hot = Keys::hot(100, 3, 0.0);
        for _ in 0..10_000 {
            assert!(all_hot.next(&mut rng) < 3);
            assert!(no_hot.next(&mut rng) >= 3);
        }
    }

    #[test]
    fn seq_visits_each_key_once_then_wraps() {
        let keys = Keys::new(5, Dist::Seq, 1.0);
        let mut rng = Rng::new(3);
        let got: Vec<usize> = (0..7).map(|_| keys.next(&mut rng)).collect();
        assert_eq!(got, [0, 1, 2, 3, 4, 0, 1]);
    }

    #[test]
    fn below_stays_in_range_and_unit_is_in_0_1() {
        let mut rng = Rng::new(4);
        for n in [1u64, 2, 3, 1000, u64::MAX] {
            for _ in 0..1000 {
                assert!(rng.below(n) < n);
            }
        }
        for _ in 0..1000 {
            let u = rng.unit();
            assert!(u > 0.0 && u <= 1.0);
        }
    }
}
