//! The load generator: `threads` OS threads, each with its own
//! current-thread tokio runtime and its share of the `connections`; the
//! `concurrency` tasks are spread over the connections.
//!
//! - Closed loop (default): each task asks, waits for the answer, asks again.
//!   C requests are always in flight.
//! - Open loop (`--rate R`): requests start on a fixed schedule of R per
//!   second whatever the answers do, at most C in flight. Latency counts
//!   from when a request was *due*, not when it could be sent, so a stall
//!   shows up in the percentiles (no coordinated omission). Requests due
//!   in the same millisecond leave together (the timer's granularity).
//!
//! Only requests that end inside the measured window (after the warm-up)
//! count. A progress line goes to stderr about once a second.
//!
//! With `admission` set, every decision (warm-up included) is also counted
//! per key and fixed window, timed by the wall clock at send and answer
//! (see [`crate::admission`]).

use crate::admission::{wall_ns, FixedLimit};
use crate::keys::{Keys, Rng};
use crate::report::{Outcome, Recorder};
use crate::target::{Connect, Reply, Target};
use anyhow::{anyhow, Context as _, Result};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};
use tokio::sync::watch;

#[derive(Clone, Debug)]
pub struct LoadOptions {
    pub concurrency: usize,
    pub connections: usize,
    pub threads: usize,
    /// Measured window after the warm-up (closed and open loop), unless `requests` is set.
    pub duration: Duration,
    pub warmup: Duration,
    /// Stop after this many requests instead (no warm-up; the window is the whole run).
    pub requests: Option<u64>,
    /// Open loop: requests per second (all threads together).
    pub rate: Option<f64>,
    pub progress: bool,
    /// Count decisions per key and window of this fixed-window limit.
    pub admission: Option<FixedLimit>,
}

/// What a run measured.
pub struct Measured {
    pub recorder: Recorder,
    pub window: Duration,
    pub client_stats: Option<serde_json::Value>,
}

/// The clock every thread shares once all connections are up.
#[derive(Clone, Copy)]
struct Start {
    at: Instant,
    window_start: Instant,
    window_end: Option<Instant>,
    admission: Option<FixedLimit>,
}

struct Shared {
    stop: AtomicBool,
    budget: Option<AtomicI64>,
    /// One per load thread: counting answers must not make the threads
    /// fight over one cache line (or over `stop`'s) on every answer.
    progress: Box<[Progress]>,
}

/// What one load thread has seen so far (for the progress lines).
#[derive(Default)]
#[repr(align(128))]
struct Progress {
    done: AtomicU64,
    decided: AtomicU64,
    errors: AtomicU64,
}

impl Shared {
    fn total(&self, of: impl Fn(&Progress) -> &AtomicU64) -> u64 {
        self.progress
            .iter()
            .map(|p| of(p).load(Ordering::Relaxed))
            .sum()
    }
}

/// Runs the load against the target `connect` opens; returns what the window measured.
pub fn run<C: Connect>(connect: C, keys: Keys, opts: &LoadOptions) -> Result<Measured> {
    let threads = opts.threads.clamp(1, opts.connections);
    let shared = Arc::new(Shared {
        stop: AtomicBool::new(false),
        budget: opts.requests.map(|n| AtomicI64::new(n as i64)),
        progress: (0..threads).map(|_| Progress::default()).collect(),
    });
    let (start_tx, start_rx) = watch::channel::<Option<Start>>(None);
    let (up_tx, up_rx) = mpsc::channel::<Result<()>>();
    let mut handles = Vec::new();
    for t in 0..threads {
        let channels = (start_rx.clone(), up_tx.clone());
        let handle = spawn_thread(
            t,
            threads,
            opts,
            connect.clone(),
            keys.clone(),
            shared.clone(),
            channels,
        )?;
        handles.push(handle);
    }
    drop(up_tx);
    // All connections up (or the first error), then the clock starts.
    let mut failure = None;
    for _ in 0..threads {
        match up_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                failure = Some(e);
                break;
            }
            Err(_) => {
                failure = Some(anyhow!("a load thread ended before connecting"));
                break;
            }
        }
    }
    if let Some(e) = failure {
        drop(start_tx); // the threads see the sender gone and return
        for h in handles {
            let _ = h.join();
        }
        return Err(e);
    }
    let at = Instant::now();
    let (window_start, window_end) = match opts.requests {
        Some(_) => (at, None),
        None => (at + opts.warmup, Some(at + opts.warmup + opts.duration)),
    };
    let _ = start_tx.send(Some(Start {
        at,
        window_start,
        window_end,
        admission: opts.admission,
    }));
    watch_progress(&shared, opts, &handles, (at, window_start, window_end));
    shared.stop.store(true, Ordering::SeqCst);
    let mut recorder = Recorder::default();
    let mut last_done = at;
    let mut client_stats: Vec<serde_json::Value> = Vec::new();
    for h in handles {
        let thread = h.join().map_err(|_| anyhow!("a load thread panicked"))??;
        recorder.merge(thread.recorder);
        if let Some(t) = thread.last_done {
            last_done = last_done.max(t);
        }
        client_stats.extend(thread.client_stats);
    }
    let window = match window_end {
        Some(end) => end - window_start,
        None => last_done - at,
    };
    Ok(Measured {
        recorder,
        window,
        client_stats: merge_stats(client_stats),
    })
}

/// Starts load thread `t` of `threads`: its share of the connections and
/// tasks, on a current-thread runtime of its own. It says on `up` when its
/// connections are up (or the first failed), waits for the clock on
/// `start`, runs the closed or open loop, and returns what it recorded.
fn spawn_thread<C: Connect>(
    t: usize,
    threads: usize,
    opts: &LoadOptions,
    connect: C,
    keys: Keys,
    shared: Arc<Shared>,
    channels: (watch::Receiver<Option<Start>>, mpsc::Sender<Result<()>>),
) -> Result<std::thread::JoinHandle<Result<Thread>>> {
    let conns: Vec<usize> = (0..opts.connections).filter(|c| c % threads == t).collect();
    // Task j rides connection j % M.
    let tasks: Vec<usize> = (0..opts.concurrency)
        .filter(|j| (j % opts.connections) % threads == t)
        .map(|j| j % opts.connections)
        .collect();
    let (start_rx, up_tx) = channels;
    let rate = opts.rate.map(|r| r / threads as f64);
    let inflight_cap = tasks.len().max(1);
    std::thread::Builder::new()
        .name(format!("bench-{t}"))
        .spawn(move || -> Result<Thread> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let local = tokio::task::LocalSet::new();
            local.block_on(&rt, async move {
                let mut targets = Vec::new();
                for &c in &conns {
                    match connect.connect(c).await {
                        Ok(target) => targets.push((c, Rc::new(target))),
                        Err(e) => {
                            let _ = up_tx.send(Err(e));
                            return Ok(Thread::default());
                        }
                    }
                }
                let _ = up_tx.send(Ok(()));
                let start = wait_start(start_rx).await;
                let Some(start) = start else {
                    return Ok(Thread::default());
                };
                let rec = Rc::new(RefCell::new(Recorder::default()));
                let seed = (t as u64 + 1) << 32;
                let load = Load {
                    keys: &keys,
                    shared: &shared,
                    thread: t,
                    start,
                    rec: &rec,
                    seed,
                };
                match rate {
                    None => closed_loop(&targets, &tasks, load).await,
                    Some(rate) => {
                        let targets: Vec<Rc<C::Target>> =
                            targets.iter().map(|(_, t)| t.clone()).collect();
                        open_loop(targets, load, rate, inflight_cap).await
                    }
                }
                let stats = merge_stats(targets.iter().filter_map(|(_, t)| t.stats()).collect());
                let rec = Rc::try_unwrap(rec)
                    .map_err(|_| anyhow!("a load task outlived the run"))?
                    .into_inner();
                Ok(Thread {
                    recorder: rec,
                    last_done: None,
                    client_stats: stats,
                }
                .finish(start))
            })
        })
        .context("cannot start a load thread")
}

/// Until the window ends (or, with a budget of requests, every thread):
/// a progress line once a second on stderr, if asked for.
fn watch_progress<T>(
    shared: &Shared,
    opts: &LoadOptions,
    handles: &[std::thread::JoinHandle<T>],
    (at, window_start, window_end): (Instant, Instant, Option<Instant>),
) {
    let mut last = (at, 0u64);
    loop {
        let now = Instant::now();
        if let Some(end) = window_end {
            if now >= end {
                break;
            }
        } else if handles.iter().all(|h| h.is_finished()) {
            break;
        }
        let next_tick = last.0 + Duration::from_secs(1);
        let sleep_until = match window_end {
            Some(end) => next_tick.min(end),
            None => next_tick,
        };
        std::thread::sleep(
            sleep_until
                .saturating_duration_since(now)
                .min(Duration::from_millis(100)),
        );
        let now = Instant::now();
        if now >= next_tick {
            let done = shared.total(|p| &p.done);
            if opts.progress {
                let rate = (done - last.1) as f64 / now.duration_since(last.0).as_secs_f64();
                let phase = if now < window_start { " (warm-up)" } else { "" };
                eprintln!(
                    "[bench] {:>5.1} s  {:>8.0} req/s  decided {}  errors {}{phase}",
                    now.duration_since(at).as_secs_f64(),
                    rate,
                    shared.total(|p| &p.decided),
                    shared.total(|p| &p.errors),
                );
            }
            last = (now, done);
        }
    }
}

#[derive(Default)]
struct Thread {
    recorder: Recorder,
    last_done: Option<Instant>,
    client_stats: Option<serde_json::Value>,
}

impl Thread {
    fn finish(mut self, start: Start) -> Thread {
        if start.window_end.is_none() {
            self.last_done = Some(LAST_DONE.with(|l| l.get()).unwrap_or(start.at));
        }
        self
    }
}

thread_local! {
    /// When the last request of this thread ended (for `--requests` runs).
    static LAST_DONE: std::cell::Cell<Option<Instant>> = const { std::cell::Cell::new(None) };
}

async fn wait_start(mut rx: watch::Receiver<Option<Start>>) -> Option<Start> {
    loop {
        if let Some(start) = *rx.borrow_and_update() {
            return Some(start);
        }
        rx.changed().await.ok()?;
    }
}

fn take_one(shared: &Shared) -> bool {
    if shared.stop.load(Ordering::Relaxed) {
        return false;
    }
    match &shared.budget {
        Some(b) => b.fetch_sub(1, Ordering::Relaxed) > 0,
        None => true,
    }
}

/// When a request left: for its latency, and (with admission accounting)
/// on the wall clock.
#[derive(Clone, Copy)]
struct Sent {
    began: Instant,
    wall_ns: u64,
}

impl Sent {
    /// Leaving now; latency counts from `began` if given (the open loop's
    /// schedule), else from now.
    fn now(start: &Start, began: Option<Instant>) -> Sent {
        let now = Instant::now();
        Sent {
            began: began.unwrap_or(now),
            wall_ns: if start.admission.is_some() {
                wall_ns()
            } else {
                0
            },
        }
    }
}

fn note(
    progress: &Progress,
    start: &Start,
    rec: &RefCell<Recorder>,
    key: usize,
    reply: Reply,
    sent: Sent,
) {
    let done = Instant::now();
    let Reply {
        outcome,
        why,
        window,
    } = reply;
    progress.done.fetch_add(1, Ordering::Relaxed);
    if matches!(outcome, Outcome::Allowed | Outcome::Denied) {
        progress.decided.fetch_add(1, Ordering::Relaxed);
        if let Some(limit) = &start.admission {
            let allowed = outcome == Outcome::Allowed;
            let received = wall_ns();
            rec.borrow_mut()
                .answers
                .count(limit, key, allowed, window, sent.wall_ns, received);
        }
    } else {
        progress.errors.fetch_add(1, Ordering::Relaxed);
    }
    let in_window = done >= start.window_start && start.window_end.is_none_or(|end| done <= end);
    if in_window {
        let mut rec = rec.borrow_mut();
        rec.record(outcome, done - sent.began);
        if let Some(why) = why {
            rec.note_other(|| why);
        }
        if start.window_end.is_none() {
            LAST_DONE.with(|l| l.set(Some(done)));
        }
    }
}

/// What one load thread's loop works with.
struct Load<'a> {
    keys: &'a Keys,
    shared: &'a Arc<Shared>,
    thread: usize,
    start: Start,
    rec: &'a Rc<RefCell<Recorder>>,
    /// The thread's seed for its tasks' key choices.
    seed: u64,
}

async fn closed_loop<T: Target>(targets: &[(usize, Rc<T>)], tasks: &[usize], load: Load<'_>) {
    let Load {
        keys,
        shared,
        thread,
        start,
        rec,
        seed,
    } = load;
    let mut joins = Vec::new();
    for (i, &conn) in tasks.iter().enumerate() {
        let target = targets
            .iter()
            .find(|(c, _)| *c == conn)
            .map(|(_, t)| t.clone())
            .expect("the task's connection is on this thread");
        let keys = keys.clone();
        let shared = shared.clone();
        let rec = rec.clone();
        let mut rng = Rng::new(seed + i as u64);
        joins.push(tokio::task::spawn_local(async move {
            while take_one(&shared) {
                let key = keys.next(&mut rng);
                let sent = Sent::now(&start, None);
                let reply = target.ask(key).await;
                note(&shared.progress[thread], &start, &rec, key, reply, sent);
            }
        }));
    }
    for j in joins {
        let _ = j.await;
    }
}

async fn open_loop<T: Target>(targets: Vec<Rc<T>>, load: Load<'_>, rate: f64, cap: usize) {
    let Load {
        keys,
        shared,
        thread,
        start,
        rec,
        seed,
    } = load;
    let permits = Arc::new(tokio::sync::Semaphore::new(cap));
    let mut rng = Rng::new(seed);
    let mut sent: u64 = 0;
    // When the generator last came back from sleeping. Latency counts from
    // when a request was due on the fixed schedule, or from `woke` if that
    // is later: tokio's timer wakes us about once a millisecond, and that
    // lateness is the generator's, not the target's. The generator sleeps
    // only when it has caught up, so while it waits for a permit (C in
    // flight) `woke` stays put and the target is charged for the wait.
    let mut woke = start.at;
    while !shared.stop.load(Ordering::Relaxed) {
        let due = (start.at.elapsed().as_secs_f64() * rate) as u64;
        if sent >= due {
            tokio::time::sleep(Duration::from_millis(1)).await;
            woke = Instant::now();
            continue;
        }
        if !take_one(shared) {
            break;
        }
        let scheduled = start.at + Duration::from_secs_f64(sent as f64 / rate);
        let began = scheduled.max(woke);
        let permit = permits
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        let target = targets[sent as usize % targets.len()].clone();
        let key = keys.next(&mut rng);
        let shared = shared.clone();
        let rec = rec.clone();
        let left = Sent::now(&start, Some(began));
        tokio::task::spawn_local(async move {
            let reply = target.ask(key).await;
            note(&shared.progress[thread], &start, &rec, key, reply, left);
            drop(permit);
        });
        sent += 1;
    }
    // Wait for what is in flight.
    let _ = permits.acquire_many(cap as u32).await;
}

/// Adds up the batching clients' counters across connections.
fn merge_stats(all: Vec<serde_json::Value>) -> Option<serde_json::Value> {
    let mut it = all.into_iter();
    let mut total = it.next()?;
    for v in it {
        if let (Some(t), Some(v)) = (total.as_object_mut(), v.as_object()) {
            for (k, n) in v {
                if let (Some(a), Some(b)) = (t.get(k).and_then(|x| x.as_u64()), n.as_u64()) {
                    t.insert(k.clone(), (a + b).into());
                }
            }
        }
    }
    Some(total)
}
