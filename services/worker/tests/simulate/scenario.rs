//! What a seed simulates: the regions and their weights, the one global
//! policy (homed in east), the network's faults, the keys, the mode, and
//! how the link and the workers fail over the run; and the bound a key's
//! admitted asks must keep (docs/REGIONS-DESIGN.md, "Bounds, and why they
//! hold").

use crate::net::{pick, Faults};
use crate::{MS, PARTITIONS, SEC};
use rand::rngs::StdRng;
use rand::Rng;
use sluice_core::time::Nanos;

/// What a seed simulates.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub regions: Vec<(&'static str, u64)>,
    pub algorithm: &'static str,
    pub max: u64,
    pub per: &'static str,
    pub on_cut: &'static str,
    pub faults: Faults,
    pub keys: Vec<String>,
    /// Journal mode (else snapshot mode).
    pub journal: bool,
    /// How often each owner is asked for a snapshot (it writes one when
    /// its counters changed).
    pub snapshot_every: Nanos,
    /// How far each region's clock may be off the home's (ns): each other
    /// region draws its offset within ±this.
    pub skew: Nanos,
    /// How the link is cut over the run.
    pub cuts: Cuts,
    /// A region's worker is stopped and started again about once per
    /// this many asks (`None`: never), killed or handed over at random.
    pub restarts: Option<u32>,
    /// Workers killed at given times (since the start), by region, on
    /// top of `restarts`.
    pub kills: Vec<(Nanos, usize)>,
    /// Keep, per key and window, the home's count and the slices the
    /// other regions hold as the window ends ([`crate::Report::at_end`]).
    pub watch_slices: bool,
    /// Threshold alerts (SPEC §14) on the policy, a fixed window's: fired
    /// at the home by what every region spent.
    pub alerts: &'static [u16],
    /// Nothing lost, cut or killed: then no region may deny an ask itself
    /// while the home's count has room (docs/REGIONS-DESIGN.md, "Asks the
    /// region cannot pay for go to the home"); the home's own answers
    /// keep what it keeps for its own asks.
    pub lossless: bool,
}

/// How the link between the regions is cut over a run.
#[derive(Debug, Clone, Copy)]
pub enum Cuts {
    /// Never.
    Never,
    /// Cut or healed at random, about once per this many asks.
    Random(u32),
    /// Cut from one time to another (simulated, since the start).
    Between(Nanos, Nanos),
}

impl Cuts {
    /// Whether the link is cut at `now`, `elapsed` since the start, given
    /// whether it was (`Random` flips it now and then).
    pub fn at(self, rng: &mut StdRng, elapsed: Nanos, was: bool) -> bool {
        match self {
            Cuts::Never => false,
            Cuts::Random(every) => was ^ (rng.gen_range(0..every) == 0),
            Cuts::Between(from, to) => elapsed >= from && elapsed < to,
        }
    }
}

impl Scenario {
    /// A seed's random world.
    pub fn draw(rng: &mut StdRng) -> Scenario {
        let three = rng.gen_bool(0.3);
        let mut regions = vec![
            ("east", rng.gen_range(1..=3)),
            ("west", rng.gen_range(1..=3)),
        ];
        if three {
            regions.push(("south", rng.gen_range(1..=3)));
        }
        let keys = (0..rng.gen_range(1..=3)).map(|k| format!("k{k}")).collect();
        Scenario {
            regions,
            algorithm: pick::<&str>(
                rng,
                &[
                    "fixed_window",
                    "fixed_window",
                    "token_bucket",
                    "gcra",
                    "sliding_window",
                    "sliding_log",
                ],
            ),
            max: *pick(rng, &[5, 20, 100]),
            per: pick::<&str>(rng, &["1s", "2s"]),
            on_cut: pick::<&str>(rng, &["reserved", "reserved", "closed", "open"]),
            faults: Faults::draw(rng),
            keys,
            journal: rng.gen_bool(0.5),
            snapshot_every: Nanos(*pick(rng, &[250, 500, 1_000]) * MS),
            skew: Nanos(*pick(rng, &[0, 0, 5, 50]) * MS),
            cuts: Cuts::Random(200),
            restarts: Some(150),
            kills: Vec::new(),
            watch_slices: false,
            alerts: &[],
            lossless: false,
        }
        .maybe_alerting(rng)
        .maybe_lossless(rng)
    }

    /// Half the fixed windows alert (the only algorithm that may).
    fn maybe_alerting(self, rng: &mut StdRng) -> Scenario {
        if !self.fixed() || !rng.gen_bool(0.5) {
            return self;
        }
        Scenario {
            alerts: &[25, 50, 90, 100],
            ..self
        }
    }

    /// A third of the seeds lose nothing: no message lost or doubled, the
    /// link never cut, no worker killed.
    fn maybe_lossless(self, rng: &mut StdRng) -> Scenario {
        if !rng.gen_bool(0.3) {
            return self;
        }
        Scenario {
            faults: Faults {
                drop_per_mille: 0,
                duplicate_per_mille: 0,
                ..self.faults
            },
            cuts: Cuts::Never,
            restarts: None,
            lossless: true,
            ..self
        }
    }

    /// Two regions of equal weight, a fixed window of 100 a second, one
    /// key, snapshot mode, nothing lost, the link never cut: the
    /// two-region integration tests' world, to change.
    pub fn two_regions() -> Scenario {
        Scenario {
            regions: vec![("east", 1), ("west", 1)],
            algorithm: "fixed_window",
            max: 100,
            per: "1s",
            on_cut: "reserved",
            faults: Faults {
                drop_per_mille: 0,
                duplicate_per_mille: 0,
                max_delay: Nanos(20_000_000),
            },
            keys: vec!["k0".to_string()],
            journal: false,
            snapshot_every: Nanos(2 * SEC),
            skew: Nanos::ZERO,
            cuts: Cuts::Never,
            restarts: None,
            kills: Vec::new(),
            watch_slices: false,
            alerts: &[],
            lossless: true,
        }
    }

    /// Region `region`'s config: the one global policy, homed in east.
    pub fn toml(&self, region: &str) -> String {
        let names: Vec<String> = self.regions.iter().map(|(n, _)| format!("{n:?}")).collect();
        let shares: Vec<String> = self
            .regions
            .iter()
            .map(|(n, w)| format!("{n} = {w}"))
            .collect();
        let alerts: Vec<String> = self.alerts.iter().map(u16::to_string).collect();
        format!(
            r#"region = "{region}"
partitions = {PARTITIONS}
[policies.default]
algorithm = "{algorithm}"
limits = [ {{ max = {max}, per = "{per}" }} ]
scope = "global"
home = "east"
regions = [{names}]
region_shares = {{ {shares} }}
on_cut = "{on_cut}"
alerts = [{alerts}]
"#,
            alerts = alerts.join(", "),
            algorithm = self.algorithm,
            max = self.max,
            per = self.per,
            on_cut = self.on_cut,
            names = names.join(", "),
            shares = shares.join(", "),
        )
    }

    /// How many whole limits the regions may admit together: with
    /// `on_cut = "open"`, one in each while cut (SPEC §12).
    pub fn limits(&self) -> u64 {
        match self.on_cut {
            "open" => self.regions.len() as u64,
            _ => 1,
        }
    }

    /// What a fixed window may admit beyond its limits when the regions'
    /// clocks disagree: each region whose clock is off starts its share of
    /// a window up to the skew early or late, so one share more per window
    /// boundary (docs/REGIONS-DESIGN.md, "Known gaps"). None without skew.
    pub fn skewed_shares(&self) -> u64 {
        if self.skew == Nanos::ZERO || !self.fixed() {
            return 0;
        }
        let weights: u64 = self.regions.iter().map(|(_, w)| w).sum();
        let delegates = self.regions.iter().skip(1);
        delegates
            .map(|(_, w)| (self.max * w).div_ceil(weights))
            .sum()
    }

    pub fn per(&self) -> u64 {
        match self.per {
            "1s" => SEC,
            _ => 2 * SEC,
        }
    }

    /// A token bucket or GCRA: its bound is over the whole run.
    pub fn bucket(&self) -> bool {
        matches!(self.algorithm, "token_bucket" | "gcra")
    }

    /// A sliding log or window: its bound is over every span of `per`
    /// (`sliding.rs`).
    pub fn sliding(&self) -> bool {
        matches!(self.algorithm, "sliding_log" | "sliding_window")
    }

    pub fn fixed(&self) -> bool {
        self.algorithm == "fixed_window"
    }

    /// Where a fixed window's count is kept (a sliding policy's is
    /// reported by the same windows): per window; a bucket's, over the
    /// whole run.
    pub fn window_start(&self, now: Nanos) -> Nanos {
        match self.bucket() {
            true => Nanos::ZERO,
            false => Nanos(now.0 - now.0 % self.per()),
        }
    }

    /// The most a key may have admitted over all regions, `count` units in
    /// its window (a bucket: since `start`): a fixed window's `max`; a
    /// bucket's `burst + rate × elapsed` (docs/REGIONS-DESIGN.md, "Bounds,
    /// and why they hold").
    pub fn within(&self, count: u64, start: Nanos, now: Nanos) -> bool {
        let limits = u128::from(self.limits());
        if !self.bucket() {
            let most = limits * u128::from(self.max) + u128::from(self.skewed_shares());
            return u128::from(count) <= most;
        }
        let elapsed = u128::from(now.0 - start.0);
        let per = u128::from(self.per());
        let most = limits * (u128::from(self.max) * per + u128::from(self.max) * elapsed);
        u128::from(count) * per <= most
    }
}
