//! The simulator's seeded network between regions: every message of the
//! link is delayed at random (so messages overtake each other), and may
//! be dropped or delivered twice; while the link is cut, every message
//! between two regions is lost. Nothing depends on wall time: a message
//! is delivered when the simulated clock reaches its time.

use rand::rngs::StdRng;
use rand::Rng;
use sluice_core::time::Nanos;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// How a seed's network misbehaves.
#[derive(Clone, Copy, Debug)]
pub struct Faults {
    /// Out of 1,000 messages, how many are lost.
    pub drop_per_mille: u32,
    /// Out of 1,000 messages, how many arrive twice.
    pub duplicate_per_mille: u32,
    /// One way, from 1 ms up to this.
    pub max_delay: Nanos,
}

impl Faults {
    /// A seed's faults.
    pub fn draw(rng: &mut StdRng) -> Faults {
        let duplicate_per_mille = *pick(rng, &[0, 0, 10, 100]);
        Faults {
            drop_per_mille: *pick(rng, &[0, 0, 10, 50, 200]),
            duplicate_per_mille,
            max_delay: Nanos(*pick(rng, &[2, 20, 60, 150]) * 1_000_000),
        }
    }
}

pub fn pick<'a, T>(rng: &mut StdRng, from: &'a [T]) -> &'a T {
    &from[rng.gen_range(0..from.len())]
}

/// Something that happens at a time: a message arriving, or a request's
/// time to be answered running out.
#[derive(Clone, Debug)]
pub enum Due<M> {
    Arrives(M),
    TimesOut(u64),
}

/// What is in flight, by when it is due (then in the order it was sent,
/// so that a seed replays exactly).
pub struct Net<M> {
    faults: Faults,
    queue: BinaryHeap<Reverse<(Nanos, u64)>>,
    items: std::collections::HashMap<u64, Due<M>>,
    next: u64,
    /// Messages lost (dropped or cut off) and delivered twice, for the trace.
    pub lost: u64,
    pub doubled: u64,
}

impl<M: Clone> Net<M> {
    pub fn new(faults: Faults) -> Net<M> {
        Net {
            faults,
            queue: BinaryHeap::new(),
            items: std::collections::HashMap::new(),
            next: 0,
            lost: 0,
            doubled: 0,
        }
    }

    fn at(&mut self, when: Nanos, due: Due<M>) {
        let id = self.next;
        self.next += 1;
        self.queue.push(Reverse((when, id)));
        self.items.insert(id, due);
    }

    /// Sends `message` across the link at `now` (`cut`: the link is down).
    pub fn send(&mut self, rng: &mut StdRng, now: Nanos, cut: bool, message: M) {
        if cut || rng.gen_range(0..1000) < self.faults.drop_per_mille {
            self.lost += 1;
            return;
        }
        let copies = if rng.gen_range(0..1000) < self.faults.duplicate_per_mille {
            self.doubled += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            let delay = rng.gen_range(1_000_000..=self.faults.max_delay.0.max(1_000_000));
            self.at(
                now.saturating_add(Nanos(delay)),
                Due::Arrives(message.clone()),
            );
        }
    }

    /// Request `request`'s answer stops being waited for at `when`.
    pub fn time_out(&mut self, when: Nanos, request: u64) {
        self.at(when, Due::TimesOut(request));
    }

    /// The next thing due at or before `now`.
    pub fn pop_due(&mut self, now: Nanos) -> Option<Due<M>> {
        let Reverse((when, id)) = *self.queue.peek()?;
        if when > now {
            return None;
        }
        self.queue.pop();
        self.items.remove(&id)
    }
}
