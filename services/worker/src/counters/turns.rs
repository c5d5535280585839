//! Turns, and copies between them: what makes a snapshot hold exactly the records up to
//! one turn, so that a journal replay counts each record once.
//!
//! A partition's counters change in turns: a batch of decisions on its
//! owner's task, a worker batch's items of it, a sweep of ended holds.
//! Each turn draws a number, one more than the last, and the records it
//! makes carry it ([`crate::journal::record::RecordOf::q`]). A snapshot
//! copies the counters (and the state kept beside them) between two turns
//! ([`super::TurnCopy`]): while
//! it copies no turn is in progress, so every turn numbered up to the
//! copy's number is in it and none after it. A new owner replays only
//! the records numbered above the number its snapshot carries, whatever
//! their place in the journal; the journal position only says where to
//! start reading.
//!
//! Why not the journal position alone: the copy is encoded while decisions
//! go on, and the writer's acknowledged position is taken before it, so the
//! records stored between the two were both in the copy and replayed after
//! a crash (a key counted up to ten units twice in a `kill -9` test). Why a
//! copy and not a pause: copying a partition's packed tables is a memcpy of
//! a few hundred kilobytes at most; encoding them takes milliseconds, and
//! runs on another thread from the copy while the partition answers.
//!
//! Turns never wait for each other (a turn only counts itself in); a copy
//! waits for the turns in progress to end and holds new ones back while it
//! copies. A turn is never held across an `.await` (the turn's log that holds
//! it is finished first), so on the worker's one-thread runtime a copy
//! finds none in progress; elsewhere (`sluice dev`, tests) it waits the
//! microseconds one takes. Should a turn be held for long anyway, the copy
//! gives up after [`CUT_PATIENCE`] rather than stall the partition, and the
//! snapshot is tried again at the next tick.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// How long a copy waits for the turns in progress before it gives up.
pub const CUT_PATIENCE: Duration = Duration::from_millis(500);

/// The turns of one partition's counters.
#[derive(Debug, Default)]
pub struct Turns {
    state: Mutex<State>,
    /// Signalled when the last turn in progress ends, or a copy ends.
    changed: Condvar,
}

#[derive(Debug, Default)]
struct State {
    /// The number of the latest turn begun.
    last: u64,
    in_progress: usize,
    /// A copy is waiting or copying: no turn begins.
    copying: bool,
}

/// A turn in progress; it ends when dropped.
#[derive(Debug)]
pub struct Turn {
    turns: Arc<Turns>,
    number: u64,
}

impl Turn {
    /// The turn's number: the records it makes carry it.
    pub fn number(&self) -> u64 {
        self.number
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut state = self.turns.lock();
        state.in_progress -= 1;
        if state.in_progress == 0 && state.copying {
            self.turns.changed.notify_all();
        }
    }
}

/// A copy could not be made: a turn stayed in progress too long.
#[derive(Debug, thiserror::Error)]
#[error("a turn on this partition stayed in progress for over {CUT_PATIENCE:?}, so the snapshot could not copy the counters between two turns; it is tried again at the next snapshot interval")]
pub struct TurnHeld;

impl Turns {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Begins a turn (waiting while a copy is made).
    pub fn begin(self: &Arc<Self>) -> Turn {
        let mut state = self.lock();
        while state.copying {
            state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        state.in_progress += 1;
        state.last += 1;
        Turn {
            turns: self.clone(),
            number: state.last,
        }
    }

    /// The number of the latest turn begun.
    pub fn last(&self) -> u64 {
        self.lock().last
    }

    /// At takeover: the turns from now on are numbered after `number` (what
    /// the restored snapshot and the replayed records were numbered up to),
    /// so that a later owner tells this owner's records from theirs.
    pub fn resume_after(&self, number: u64) {
        let mut state = self.lock();
        state.last = state.last.max(number);
    }

    /// Runs `copy` between two turns: none in progress, none begun until
    /// it returns. Gives `copy` the number of the last turn it sees.
    pub fn between<R>(&self, copy: impl FnOnce(u64) -> R) -> Result<R, TurnHeld> {
        let mut state = self.lock();
        while state.copying {
            state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        state.copying = true;
        let (mut state, waited) = self
            .changed
            .wait_timeout_while(state, CUT_PATIENCE, |s| s.in_progress > 0)
            .unwrap_or_else(|e| e.into_inner());
        let result = if waited.timed_out() && state.in_progress > 0 {
            Err(TurnHeld)
        } else {
            Ok(copy(state.last))
        };
        state.copying = false;
        self.changed.notify_all();
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turns_are_numbered_in_order_and_resume_after_a_takeover() {
        let turns = Arc::new(Turns::default());
        assert_eq!(turns.begin().number(), 1);
        assert_eq!(turns.begin().number(), 2);
        turns.resume_after(40);
        assert_eq!(turns.begin().number(), 41);
        turns.resume_after(7);
        assert_eq!(turns.begin().number(), 42, "never numbered back");
    }

    #[test]
    fn a_copy_sees_the_turns_ended_before_it_and_none_after() {
        let turns = Arc::new(Turns::default());
        drop(turns.begin());
        let seen = turns.between(|last| last).unwrap();
        assert_eq!(seen, 1);
        assert_eq!(turns.begin().number(), 2);
    }

    /// A turn in progress on another thread: the copy waits for it to end
    /// and counts it in.
    #[test]
    fn a_copy_waits_for_the_turn_in_progress() {
        let turns = Arc::new(Turns::default());
        let turn = turns.begin();
        let (started, begun) = std::sync::mpsc::channel();
        let copier = {
            let turns = turns.clone();
            std::thread::spawn(move || {
                started.send(()).unwrap();
                turns.between(|last| last)
            })
        };
        begun.recv().unwrap();
        // Whether or not the copy is waiting yet, it cannot end before the
        // turn does: it must see turn 1 ended.
        drop(turn);
        assert_eq!(copier.join().unwrap().unwrap(), 1);
    }

    #[test]
    fn a_copy_gives_up_on_a_turn_held_too_long() {
        let turns = Arc::new(Turns::default());
        let _held = turns.begin();
        let err = turns.between(|last| last).unwrap_err();
        assert!(err.to_string().contains("tried again"), "{err}");
        // And turns still begin afterwards.
        assert_eq!(turns.begin().number(), 2);
    }
}
