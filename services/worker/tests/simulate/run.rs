//! One run of a scenario, step by step: each ask a plan makes is made on
//! the world after what the network delivered by then, with the timers
//! (sweeps, snapshots), restarts and cuts the scenario draws, and the
//! checks after each step. Apart from `report.rs` (what the checks keep)
//! and `world.rs` (the regions and the link), so that the order of a step
//! reads in one place.

use crate::alerts::AlertCheck;
use crate::report::{Admission, Report};
use crate::scenario::Scenario;
use crate::sliding::SlidingBound;
use crate::usage::{add, ByKey};
use crate::world::{Answered, Region, World};
use crate::{Ask, Broken, MS, PARTITIONS, SEC, SWEEP_EVERY};
use rand::rngs::StdRng;
use rand::Rng;
use sluice_core::time::Nanos;
use std::time::Instant;

/// How soon before its window ends a threshold reached must be alerted
/// when nothing is lost: a tally report's interval (250 ms), a link trip
/// (up to 150 ms) and a clock's skew (up to 50 ms), with room to spare.
const ALERTED_WITHIN: Nanos = Nanos(600 * MS);

/// Runs `scenario` for `steps` asks that `plan` makes, checking the bound
/// after each, on `rng` (drawn from `seed`).
pub(crate) fn simulate(
    seed: u64,
    rng: &mut StdRng,
    scenario: &Scenario,
    steps: usize,
    plan: &mut dyn FnMut(&mut StdRng) -> Ask,
    tracing: bool,
) -> Result<Report, Box<Broken>> {
    let mut run = Run::new(rng, scenario, tracing);
    let mut checked = Ok(());
    for _ in 0..steps {
        let ask = plan(rng);
        checked = run.step(rng, &ask);
        if checked.is_err() {
            break;
        }
    }
    match checked.and_then(|()| run.at_the_end()) {
        Ok(()) => {
            if let Some(alerts) = &run.report.alerts {
                run.report.seen.alerts = alerts.fired;
                run.report.seen.alerts_again = alerts.again;
            }
            Ok(run.report)
        }
        Err(what) => Err(Box::new(Broken {
            seed,
            what,
            trace: run.world.trace,
        })),
    }
}

/// How a worker stops.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Stop<'a> {
    /// Between two turns: handed over (`true`), or killed.
    Between(bool),
    /// Killed in the turn of an ask of this key, before its records were
    /// stored (journal mode): the ask is never answered.
    InTurn(&'a str),
}

/// A run under way.
struct Run<'s> {
    scenario: &'s Scenario,
    world: World,
    report: Report,
    start: Nanos,
    now: Nanos,
    next_sweep: Nanos,
    next_snapshot: Nanos,
}

impl<'s> Run<'s> {
    /// The scenario's regions, each other than the home with its clock
    /// off the home's (the simulation's) as the scenario's skew allows.
    fn new(rng: &mut StdRng, scenario: &'s Scenario, tracing: bool) -> Run<'s> {
        let epoch = Instant::now();
        let start = Nanos(1_000 * SEC);
        let regions = scenario
            .regions
            .iter()
            .map(|(name, _)| {
                let toml = scenario.toml(name);
                Region::new(name, &toml, PARTITIONS, scenario.journal, (epoch, start))
            })
            .collect();
        let mut world = World::new(regions, crate::net::Net::new(scenario.faults), PARTITIONS);
        let skew = i64::try_from(scenario.skew.0).unwrap_or(i64::MAX);
        for region in world.regions.iter_mut().skip(1) {
            region.offset = rng.gen_range(-skew..=skew);
        }
        world.tracing = tracing;
        world.window = if scenario.fixed() { scenario.per() } else { 0 };
        world.max = scenario.max;
        world.trace.push(format!("{scenario:?}"));
        let mut report = Report {
            answered: vec![ByKey::new(); scenario.regions.len()],
            usage_lost: vec![ByKey::new(); scenario.regions.len()],
            ..Report::default()
        };
        if !scenario.alerts.is_empty() {
            let per_ms = scenario.per() / 1_000_000;
            report.alerts = Some(AlertCheck::new(per_ms, scenario.max, scenario.alerts));
        }
        if scenario.sliding() {
            let offsets = world.regions.iter().map(|r| r.offset).collect();
            let most = scenario.limits() * scenario.max;
            let log = scenario.algorithm == "sliding_log";
            report.sliding = Some(SlidingBound::new(log, scenario.per(), most, offsets));
        }
        Run {
            scenario,
            world,
            report,
            start,
            now: start,
            next_sweep: start.saturating_add(SWEEP_EVERY),
            next_snapshot: start.saturating_add(scenario.snapshot_every),
        }
    }

    /// One step: time moves on to the ask, what is due arrives, the
    /// timers and faults of the step, then the ask.
    fn step(&mut self, rng: &mut StdRng, ask: &Ask) -> Result<(), String> {
        self.now = self.now.saturating_add(ask.after);
        let now = self.now;
        self.world.deliver(rng, now);
        self.settle_forwarded()?;
        self.timers(rng);
        let elapsed = Nanos(now.0 - self.start.0);
        let before = Nanos(elapsed.0 - ask.after.0);
        for &(at_time, region) in &self.scenario.kills {
            if at_time > before && at_time <= elapsed {
                self.restart(rng, region, Stop::Between(false))?;
            }
        }
        if self.scenario.watch_slices {
            self.watch_slices();
        }
        let mut crash_in_turn = false;
        if let Some(every) = self.scenario.restarts {
            if rng.gen_range(0..every) == 0 {
                let at = rng.gen_range(0..self.world.regions.len());
                let handover = rng.gen_bool(0.5);
                // Half the kills in journal mode come in the step's ask,
                // between its turn and the storing of its records.
                let journal_kill = !handover && self.scenario.journal && !ask.hit;
                crash_in_turn = journal_kill && rng.gen_bool(0.5);
                if !crash_in_turn {
                    self.restart(rng, at, Stop::Between(handover))?;
                }
            }
        }
        let cut = self
            .scenario
            .cuts
            .at(rng, Nanos(now.0 - self.start.0), self.world.cut);
        if cut != self.world.cut {
            self.world.cut = cut;
            if self.world.tracing {
                self.world.note(now, format!("link cut: {cut}"));
            }
        }
        if let Some(what) = self.world.counted_twice.take() {
            return Err(what);
        }
        if crash_in_turn {
            self.restart(rng, ask.at, Stop::InTurn(&ask.key))?;
            return self.alerts_published();
        }
        if ask.hit {
            self.world.hit(rng, ask.at, &ask.key, now);
            self.report.seen.hits += 1;
            let clock = self.world.regions[ask.at].clock(now);
            self.report.answered((ask.at, &ask.key), true, (clock, now));
            return self.alerts_published();
        }
        self.ask(rng, ask)?;
        self.alerts_published()
    }

    /// The alerts fired during the step, published: only at the home, and
    /// each checked against what the regions spent.
    fn alerts_published(&mut self) -> Result<(), String> {
        for at in 0..self.world.regions.len() {
            let published = self.world.regions[at].published();
            let Some(check) = &mut self.report.alerts else {
                continue;
            };
            for alert in published {
                if self.world.tracing {
                    let line = format!("{} alerts {:?}", self.world.regions[at].name, alert);
                    self.world.note(self.now, line);
                }
                if at != 0 {
                    let name = &self.world.regions[at].name;
                    return Err(format!("{name}, not the home, alerted {:?}", alert.alert));
                }
                check.published(&alert)?;
            }
        }
        Ok(())
    }

    /// The asks the home answered for another region since the last step,
    /// each checked at the time the home decided it.
    fn settle_forwarded(&mut self) -> Result<(), String> {
        for settled in self.world.settled() {
            // The asking region counts it as the answer comes back.
            let clock = self.world.regions[settled.at].clock(self.now);
            self.report.answered(
                (settled.at, &settled.key),
                settled.allowed,
                (clock, self.now),
            );
            if !settled.allowed {
                continue;
            }
            let admission = Admission {
                key: &settled.key,
                asked_in: settled.at,
                decided_in: 0,
                decided_at: settled.decided_at,
            };
            let window = (self.start, self.now);
            self.report
                .admit(self.scenario, admission, window)
                .map_err(|what| format!("{what}, with an ask forwarded to the home"))?;
        }
        Ok(())
    }

    /// Owners give back ended slices, and write snapshots, when due.
    fn timers(&mut self, rng: &mut StdRng) {
        let now = self.now;
        if now >= self.next_sweep {
            self.world.sweep(rng, now);
            self.next_sweep = now.saturating_add(SWEEP_EVERY);
        }
        if now >= self.next_snapshot {
            for region in &mut self.world.regions {
                region.snapshot(now);
            }
            self.next_snapshot = now.saturating_add(self.scenario.snapshot_every);
        }
    }

    /// The step's ask, its answer checked: an admission against the
    /// bound; a denial, when nothing is lost, against the home's room.
    fn ask(&mut self, rng: &mut StdRng, ask: &Ask) -> Result<(), String> {
        let (scenario, now) = (self.scenario, self.now);
        let answered = self.world.ask(rng, ask.at, &ask.key, now);
        self.report.seen.asks += 1;
        self.report.window(scenario, &ask.key, now)[ask.at].asked += 1;
        if let Answered::Decided(d) = answered {
            let clock = self.world.regions[ask.at].clock(now);
            self.report
                .answered((ask.at, &ask.key), d.allowed, (clock, now));
        }
        match answered {
            Answered::Decided(d) if d.allowed => {
                let admission = Admission {
                    key: &ask.key,
                    asked_in: ask.at,
                    decided_in: ask.at,
                    decided_at: now,
                };
                self.report.admit(scenario, admission, (self.start, now))?;
            }
            Answered::Decided(_) if !self.world.cut && !scenario.bucket() => {
                let room = self.world.home_has_room(&ask.key, now);
                if scenario.lossless && room {
                    let at = scenario.regions[ask.at].0;
                    return Err(format!(
                        "{at} denied {} while the home's count had room, nothing lost \
                         (max {} per {}, on_cut = {})",
                        ask.key, scenario.max, scenario.per, scenario.on_cut
                    ));
                }
                let count: u64 = self
                    .report
                    .window(scenario, &ask.key, now)
                    .iter()
                    .map(|c| c.admitted)
                    .sum();
                self.report.seen.denied_with_room += u64::from(count < scenario.max);
            }
            _ => {}
        }
        Ok(())
    }

    /// Region `at`'s worker is stopped as `stop` says and started again.
    /// What each key had room for there before and after: the same after
    /// a handover or a kill in journal mode, neither more nor less (`Err`
    /// else; a kill in a turn whose records were not stored: the same as
    /// before that turn, whose ask was never answered); a kill in snapshot
    /// mode may give back what was counted since the last snapshot, which
    /// the key may then admit again ([`Report::lost`]).
    fn restart(&mut self, rng: &mut StdRng, at: usize, stop: Stop<'_>) -> Result<(), String> {
        let handover = stop == Stop::Between(true);
        let (scenario, now) = (self.scenario, self.now);
        let room = |world: &World| -> Vec<u64> {
            let region = &world.regions[at];
            scenario
                .keys
                .iter()
                .map(|key| region.room(key, PARTITIONS, now))
                .collect()
        };
        let before = room(&self.world);
        if stop != Stop::Between(true) {
            self.slices_lost(at);
        }
        // A handover's alerts are published before its final snapshot
        // (were they not yet, the next owner would publish them again,
        // and the stream keep one); a kill takes the publisher with it.
        match handover {
            true => self.alerts_published()?,
            false => self.world.regions[at].forget_alerts(),
        }
        let usage_held = match stop {
            Stop::InTurn(key) => {
                self.report.seen.crashed_in_turn += 1;
                self.world.crash_in_turn(rng, at, key, now)
            }
            Stop::Between(_) => self.world.restart(rng, at, handover, now),
        };
        self.report.seen.restarts += 1;
        let snapshot_kill = !handover && !scenario.journal;
        // The home forgets the ids it remembered (SPEC §16) only when
        // killed in snapshot mode.
        self.world.home_forgot |= at == 0 && snapshot_kill;
        self.report.seen.snapshot_kills += u64::from(snapshot_kill);
        if let (Some(alerts), true) = (&mut self.report.alerts, at == 0 && !handover) {
            alerts.home_killed();
        }
        if snapshot_kill {
            for (key, counts) in usage_held {
                self.report.seen.usage_lost += counts.used + counts.denied;
                add(&mut self.report.usage_lost[at], &key, counts);
            }
        }
        let after = room(&self.world);
        let mut lost_here = 0;
        for ((key, before), after) in scenario.keys.iter().zip(before).zip(after) {
            if !snapshot_kill && after != before {
                let how = match stop {
                    Stop::Between(true) => "a handover",
                    Stop::Between(false) => "a kill in journal mode",
                    Stop::InTurn(_) => "a kill before a turn's records were stored",
                };
                let name = &self.world.regions[at].name;
                return Err(format!(
                    "{how} of {name} left {key} room for {after} units, not {before} \
                     ({} max {} per {})",
                    scenario.algorithm, scenario.max, scenario.per
                ));
            }
            if snapshot_kill {
                let lost = after.saturating_sub(before);
                lost_here += lost;
                self.report.lost(scenario, key, now, lost);
            }
        }
        self.report.seen.most_lost = self.report.seen.most_lost.max(lost_here);
        Ok(())
    }

    /// Region `at` is killed: the units left in the slices it holds are
    /// lost (a crash does not carry them; they stay counted at the home).
    fn slices_lost(&mut self, at: usize) {
        let now = self.now;
        let mut lost_here = 0;
        for key in &self.scenario.keys {
            let held = self.world.regions[at].slices_held(key, PARTITIONS, now);
            if held > 0 {
                lost_here += held;
                let window = (key.clone(), self.scenario.window_start(now));
                *self.report.slices_lost.entry(window).or_default() += held;
            }
        }
        self.report.seen.slices_lost += lost_here;
        self.report.seen.kills_losing_slices += u64::from(lost_here > 0);
    }

    /// Each key's window as it stands now, kept as it ends: the home's
    /// count and the slices the other regions hold.
    fn watch_slices(&mut self) {
        let now = self.now;
        for key in &self.scenario.keys {
            let regions = &self.world.regions;
            let home = regions[0].used(key, PARTITIONS, now);
            let held = (regions.iter().skip(1))
                .map(|r| r.slices_held(key, PARTITIONS, now))
                .sum();
            let window = (key.clone(), self.scenario.window_start(now));
            self.report.at_end.insert(window, (home, held));
        }
    }

    /// At the run's end: with nothing lost, every threshold reached in
    /// time was alerted; and each region recorded as usage what it
    /// answered (its own asks, those it sent to the home, its hits), once,
    /// and nothing another region answered (SPEC §9;
    /// docs/REGIONS-DESIGN.md, "Usage"), less what kills in snapshot mode
    /// lost.
    fn at_the_end(&mut self) -> Result<(), String> {
        if let (Some(alerts), true) = (&self.report.alerts, self.scenario.lossless) {
            alerts.all_fired(self.now, ALERTED_WITHIN)?;
        }
        for at in 0..self.world.regions.len() {
            let region = &mut self.world.regions[at];
            let recorded = region.usage();
            self.report
                .check_usage(at, region.name.as_str(), &recorded)?;
        }
        Ok(())
    }
}
