//! A deterministic simulator of global limits across regions (SPEC §12,
//! docs/REGIONS-DESIGN.md): the real decision core and the real global
//! state machine of every region, joined by a seeded network that drops,
//! delays, reorders and duplicates messages, and cuts and heals the link,
//! on one simulated clock. The two-region integration tests show the
//! pieces work over real NATS; this shows the rules hold under faults
//! those tests cannot make, thousands of times over.
//!
//! Every seed draws its own world (two or three regions with their
//! weights, a global fixed window, token bucket or GCRA with its `max`,
//! `per` and `on_cut`, the network's faults, a few keys) and asks in
//! random regions. After every ask it checks the bound of
//! docs/REGIONS-DESIGN.md ("Bounds, and why they hold"): a key's fixed
//! window admitted at most `max` over all the regions, a bucket at most
//! `burst + rate × elapsed` since the start (with `on_cut = "open"`: one
//! whole limit in each region, as SPEC §12 allows while cut). A failing seed prints the command that replays it
//! alone, with a trace of what was sent and decided:
//!
//! ```text
//! SLUICE_SIM_SEED=<seed> cargo test -p sluice-worker --test simulate -- one_seed --nocapture
//! ```
//!
//! Messages delivered twice are not survived yet (a refund is taken back
//! twice at the home: docs/REGIONS-DESIGN.md, "Known gaps"), so the
//! network duplicates only with `SLUICE_SIM_DUPLICATES=1`. In journal mode
//! a region's worker is killed and restarted from its journal now and
//! then. Not simulated yet: crashes in snapshot mode, clock skew, sliding
//! policies, holds, alerts and usage.

mod net;
mod world;

use net::{pick, Faults, Net};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sluice_core::time::Nanos;
use std::collections::HashMap;
use world::{Answered, Region, World};

const SEC: u64 = 1_000_000_000;
const MS: u64 = 1_000_000;
/// Partitions each region has (keys spread over them).
const PARTITIONS: u32 = 4;
/// How many asks one seed makes.
const STEPS: usize = 250;
/// How often each owner gives back slices whose lease ended.
const SWEEP_EVERY: Nanos = Nanos(250 * MS);

/// What a seed drew.
#[derive(Debug)]
struct Scenario {
    regions: Vec<(&'static str, u64)>,
    algorithm: &'static str,
    max: u64,
    per: &'static str,
    on_cut: &'static str,
    faults: Faults,
    keys: Vec<String>,
    /// Journal mode, where a worker may be killed and restarted.
    journal: bool,
}

impl Scenario {
    fn draw(rng: &mut StdRng) -> Scenario {
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
                &["fixed_window", "fixed_window", "token_bucket", "gcra"],
            ),
            max: *pick(rng, &[5, 20, 100]),
            per: pick::<&str>(rng, &["1s", "2s"]),
            on_cut: pick::<&str>(rng, &["reserved", "reserved", "closed", "open"]),
            faults: Faults::draw(rng, duplicates()),
            keys,
            journal: rng.gen_bool(0.5),
        }
    }

    /// Region `region`'s config: the one global policy, homed in east.
    fn toml(&self, region: &str) -> String {
        let names: Vec<String> = self.regions.iter().map(|(n, _)| format!("{n:?}")).collect();
        let shares: Vec<String> = self
            .regions
            .iter()
            .map(|(n, w)| format!("{n} = {w}"))
            .collect();
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
"#,
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
    fn limits(&self) -> u64 {
        match self.on_cut {
            "open" => self.regions.len() as u64,
            _ => 1,
        }
    }

    fn per(&self) -> u64 {
        match self.per {
            "1s" => SEC,
            _ => 2 * SEC,
        }
    }

    fn bucket(&self) -> bool {
        self.algorithm != "fixed_window"
    }

    /// Where a fixed window's count is kept: per window; a bucket's,
    /// over the whole run.
    fn window_start(&self, now: Nanos) -> Nanos {
        match self.bucket() {
            true => Nanos::ZERO,
            false => Nanos(now.0 - now.0 % self.per()),
        }
    }

    /// The most a key may have admitted over all regions, `count` units in
    /// its window (a bucket: since `start`): a fixed window's `max`; a
    /// bucket's `burst + rate × elapsed` (docs/REGIONS-DESIGN.md, "Bounds,
    /// and why they hold").
    fn within(&self, count: u64, start: Nanos, now: Nanos) -> bool {
        let limits = u128::from(self.limits());
        if !self.bucket() {
            return u128::from(count) <= limits * u128::from(self.max);
        }
        let elapsed = u128::from(now.0 - start.0);
        let per = u128::from(self.per());
        let most = limits * (u128::from(self.max) * per + u128::from(self.max) * elapsed);
        u128::from(count) * per <= most
    }
}

/// What one seed saw.
#[derive(Debug, Default)]
struct Seen {
    asks: u64,
    admitted: u64,
    /// Denied while the link was up and the window had room over all regions.
    denied_with_room: u64,
    /// Workers killed and restarted from their journal.
    restarts: u64,
}

/// A seed that broke a property: what broke, and the replay.
struct Broken {
    seed: u64,
    what: String,
    trace: Vec<String>,
}

impl std::fmt::Display for Broken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "seed {}: {}", self.seed, self.what)?;
        let duplicates = if duplicates() {
            "SLUICE_SIM_DUPLICATES=1 "
        } else {
            ""
        };
        writeln!(
            f,
            "replay: {duplicates}SLUICE_SIM_SEED={} cargo test -p sluice-worker --test simulate -- one_seed --nocapture",
            self.seed
        )?;
        writeln!(f, "the last of its trace:")?;
        let from = self.trace.len().saturating_sub(60);
        for line in &self.trace[from..] {
            writeln!(f, "  {line}")?;
        }
        Ok(())
    }
}

/// Runs one seed to its end, or to the first broken property; with
/// `tracing`, keeping a trace of every step.
fn run(seed: u64, tracing: bool) -> Result<Seen, Box<Broken>> {
    let mut rng = StdRng::seed_from_u64(seed);
    let scenario = Scenario::draw(&mut rng);
    let regions = scenario
        .regions
        .iter()
        .map(|(name, _)| Region::new(name, &scenario.toml(name), PARTITIONS, scenario.journal))
        .collect();
    let mut world = World::new(regions, Net::new(scenario.faults), PARTITIONS);
    world.tracing = tracing;
    world.trace.push(format!("{scenario:?}"));
    let start = Nanos(1_000 * SEC);
    let mut now = start;
    let mut next_sweep = now.saturating_add(SWEEP_EVERY);
    let mut admitted: HashMap<(String, Nanos), u64> = HashMap::new();
    let mut seen = Seen::default();
    for _ in 0..STEPS {
        now = now.saturating_add(Nanos(rng.gen_range(0..15 * MS)));
        world.deliver(&mut rng, now);
        if now >= next_sweep {
            world.sweep(&mut rng, now);
            next_sweep = now.saturating_add(SWEEP_EVERY);
        }
        if scenario.journal && rng.gen_range(0..150) == 0 {
            let at = rng.gen_range(0..world.regions.len());
            seen.restarts += u64::from(world.restart(at, now));
        }
        if rng.gen_range(0..200) == 0 {
            world.cut = !world.cut;
            if tracing {
                world.note(now, format!("link cut: {}", world.cut));
            }
        }
        let at = rng.gen_range(0..world.regions.len());
        let key = pick(&mut rng, &scenario.keys).clone();
        let answered = world.ask(&mut rng, at, &key, now);
        seen.asks += 1;
        let window = (key.clone(), scenario.window_start(now));
        let count = admitted.entry(window).or_default();
        match answered {
            Answered::Decided(d) if d.allowed => {
                *count += 1;
                seen.admitted += 1;
                if !scenario.within(*count, start, now) {
                    let elapsed = (now.0 - start.0) as f64 / 1e9;
                    return Err(Box::new(Broken {
                        seed,
                        what: format!(
                            "key {key} admitted {count} ({}: in its window; a bucket: in {elapsed:.3} s), \
                             past its bound (max {} per {}, on_cut = {})",
                            scenario.algorithm, scenario.max, scenario.per, scenario.on_cut
                        ),
                        trace: world.trace,
                    }));
                }
            }
            Answered::Decided(_) if !world.cut && !scenario.bucket() && *count < scenario.max => {
                seen.denied_with_room += 1;
            }
            _ => {}
        }
    }
    Ok(seen)
}

/// Whether the network delivers some messages twice:
/// `SLUICE_SIM_DUPLICATES=1` (not yet survived: see `Faults::draw`).
fn duplicates() -> bool {
    std::env::var("SLUICE_SIM_DUPLICATES").is_ok_and(|v| v == "1")
}

/// How many seeds the test runs: `SLUICE_SIM_SEEDS`, else 10,000.
fn seeds() -> u64 {
    std::env::var("SLUICE_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000)
}

/// Runs `seeds` on every core: the sum of what they saw, or the first
/// seed (lowest) that broke a property.
fn run_all(seeds: u64) -> Result<Seen, u64> {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()) as u64;
    let results: Vec<Result<Seen, u64>> = std::thread::scope(|scope| {
        let runs: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || {
                    let mut total = Seen::default();
                    for seed in (t..seeds).step_by(threads as usize) {
                        let seen = run(seed, false).map_err(|_| seed)?;
                        total.asks += seen.asks;
                        total.admitted += seen.admitted;
                        total.denied_with_room += seen.denied_with_room;
                        total.restarts += seen.restarts;
                    }
                    Ok(total)
                })
            })
            .collect();
        runs.into_iter()
            .map(|r| r.join().expect("a simulation thread"))
            .collect()
    });
    let mut total = Seen::default();
    let mut broken = None;
    for result in results {
        match result {
            Ok(seen) => {
                total.asks += seen.asks;
                total.admitted += seen.admitted;
                total.denied_with_room += seen.denied_with_room;
                total.restarts += seen.restarts;
            }
            Err(seed) => broken = broken.min(Some(seed)).or(Some(seed)),
        }
    }
    broken.map_or(Ok(total), Err)
}

#[test]
fn no_seed_admits_more_than_a_global_window_allows() {
    match run_all(seeds()) {
        Ok(total) => eprintln!(
            "{} seeds: {} asks, {} admitted, {} denied while the link was up and the window had room, \
             {} workers killed and restarted",
            seeds(),
            total.asks,
            total.admitted,
            total.denied_with_room,
            total.restarts
        ),
        // Again with its trace: a seed replays exactly.
        Err(seed) => panic!("{}", run(seed, true).expect_err("it fails again")),
    }
}

/// One seed, with its whole trace: `SLUICE_SIM_SEED=<seed>`.
#[test]
fn one_seed() {
    let Some(seed) = std::env::var("SLUICE_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    else {
        return;
    };
    match run(seed, true) {
        Ok(seen) => eprintln!("seed {seed}: {seen:?}"),
        Err(broken) => {
            for line in &broken.trace {
                eprintln!("{line}");
            }
            panic!("{broken}");
        }
    }
}
