//! The journal's record: one counted request, as journal mode stores it
//! before it answers and a new owner replays it at takeover.
//!
//! Its encoding is the journal's format (`sluice_core::format::JOURNAL`):
//! an array of fields of which only those up to the last one set are
//! written, so that every release reads the records of the ones before.
//! Pure data, no I/O: the decision core builds records, [`crate::journal`]
//! stores and reads them.
//!
//! The fields are the wire form. A record is written by one constructor
//! per kind ([`Record::counted`], [`Record::refunded`],
//! [`Record::hold_reserved`], ...) and read as a typed value by one
//! function, [`RecordOf::typed`]: replay, usage and tallies `match` on its
//! [`Kind`], and nothing else reads the fields' combinations.

use serde::{Deserialize, Serialize};
use sluice_core::budget::Refund;
use sluice_core::format;
use sluice_core::holds::{End, Hold, HoldId};
use sluice_core::time::Nanos;

/// One counted request: what journal mode stores before it answers
/// (encoded here; [`crate::journal`] stores and reads them), and replays at takeover.
///
/// Encoded as an array of its fields in this order; the trailing ones only
/// up to the last one set (`[n, p, k, c, t]` for a count, `[.., t, true]`
/// for a reset, `[.., t, false, true]` for a denial (a blocked key's:
/// up to `x`, its block's end in `e`), `[.., false, false,
/// true]` for a slice, `[.., false, false, false, g, u]` for a slice given
/// back, `[.., g, u, h, e, x]` for a hold, `[.., x, v]` for a record whose
/// usage is not what its kind says, `[.., v, i]` for an ask's id), so records of counts read the same as
/// before resets, denials, budgets, holds and regions were recorded.
///
/// A hold's records (SPEC §13) name it (`h`): its reserve is a slice's
/// record (`s`, `c` held at `t`) with its end `e` and flags `x`; its settle
/// or end a slice's give-back (`g` = when it was reserved, `c` given back,
/// `u` spent); an extend has neither `s` nor `g`, only its new end `e`.
///
/// Generic over its strings: [`Record`] owns them, [`RecordRef`] borrows
/// them from the journal message it was decoded from, so a takeover skips
/// the records it does not replay without allocating for them
/// ([`crate::journal::Tails`]).
#[derive(Clone, Copy, Debug, PartialEq, Deserialize)]
#[serde(bound(deserialize = "S: Deserialize<'de>"))]
pub struct RecordOf<S> {
    /// Partition.
    pub n: u32,
    /// Policy name.
    pub p: S,
    /// Key token.
    pub k: S,
    /// Units counted (a denial: units denied; a refund: units given back).
    pub c: u64,
    /// When (ns since the epoch, the owner's clock).
    pub t: u64,
    /// A reset (`rl.reset`): the counter was forgotten (`c` is 0).
    #[serde(default)]
    pub r: bool,
    /// A denied ask, journaled for its usage (SPEC §9) only when usage
    /// is recorded: it changed no counter and replay changes none; or,
    /// whether or not usage is, one of a blocked key (SPEC §18), its
    /// block's end in `e`.
    #[serde(default)]
    pub d: bool,
    /// A slice of a local budget ([`sluice_core::budget`]): counted like
    /// an ask, but usage counts its units only as they come back spent.
    #[serde(default)]
    pub s: bool,
    /// A slice given back: when it was taken (ns, nonzero), so that replay
    /// gives `c` units back into the same window.
    #[serde(default)]
    pub g: u64,
    /// With a refund: the units of the slice that were spent (its usage).
    #[serde(default)]
    pub u: u64,
    /// The hold this record is of, if any (its id, 32 hex digits).
    #[serde(default)]
    pub h: Option<S>,
    /// A hold's end (ns since the epoch): at its reserve and extends; a
    /// blocked key's block's end, with `d`.
    #[serde(default)]
    pub e: u64,
    /// A hold's flags: [`RELEASE`] (its end gives back), [`SLOT`] (it takes
    /// a concurrency slot).
    #[serde(default)]
    pub x: u8,
    /// What it is in the usage history (SPEC §9), when not what its
    /// kind says: [`NOT_USAGE`] or [`USED_ONLY`] (global limits, SPEC
    /// §12, where a key's count and its usage live in different regions).
    #[serde(default)]
    pub v: u8,
    /// An ask's id remembered (SPEC §16): a record of its own, beside the
    /// ask's count in the same turn, that changes no counter and is no
    /// usage (`v` is [`NOT_USAGE`]); replay remembers the id again.
    #[serde(default)]
    pub i: Option<NamedOf<S>>,
    /// The turn that made it ([`crate::counters::Turns`]; 0: none, as in
    /// journals written before turns were numbered). Not one of the
    /// record's fields: a message stores the records of one turn together
    /// under its number ([`crate::journal::encode`]).
    #[serde(skip)]
    pub q: u64,
}

/// An ask's id as its record keeps it ([`RecordOf::i`]): what the ask
/// was besides the record's policy and cost, and its first answer.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct NamedOf<S> {
    pub id: S,
    /// The verb's name (`allow`, `hit`, `reserve`, `settle`, `extend`).
    pub verb: S,
    /// A reserve's hold, and its end (ns since the epoch).
    pub held: Option<(HoldId, u64)>,
    /// The first answer's `remaining`, `limit` and `reset` (ns).
    pub remaining: u64,
    pub limit: u64,
    pub reset: u64,
    /// When the id is forgotten (ns since the epoch).
    pub until: u64,
    /// When the first ask's caller starts, if later than the record's
    /// time (ns since the epoch, SPEC §18; 0: at once). Left out when 0,
    /// so that such a record reads as before waiting; a message with one
    /// is [`format::JOURNAL`] (8), which releases before refuse.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub start: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// [`RecordOf::v`]: counted, but not usage: what another region's owner
/// sent over the link (its region records the usage), and a delegate's
/// books of its share (spent or given back; its asks' usage is recorded
/// apart, [`USED_ONLY`]).
pub const NOT_USAGE: u8 = 1;
/// [`RecordOf::v`]: `c` units used, in the usage history only; it changes
/// no counter and replay changes none (a delegate's ask, decided from
/// budget the home counted).
pub const USED_ONLY: u8 = 2;

/// [`RecordOf::x`]: the hold is released, not charged, at its end.
pub const RELEASE: u8 = 1;
/// [`RecordOf::x`]: the hold takes a concurrency slot.
pub const SLOT: u8 = 2;

/// A journal record that owns its strings.
pub type Record = RecordOf<String>;

/// A journal record whose strings borrow from the message it was read from.
pub type RecordRef<'a> = RecordOf<&'a str>;

/// What a record is, read from its fields by [`RecordOf::typed`] alone:
/// replay, usage and tallies `match` on it rather than on the fields.
#[derive(Debug, PartialEq)]
pub enum Kind<'r, S> {
    /// `units` counted: an ask, a hit, a delegate's books of its share.
    Counted { units: u64 },
    /// The key's counter forgotten (`rl.reset`).
    Reset,
    /// A denied ask of `units`, kept for its usage (SPEC §9): it changed
    /// no counter and replay changes none. With `blocked_until` (its `e`),
    /// the key was blocked until then (SPEC §18): replay blocks it again
    /// (the record is written with or without usage, [`NOT_USAGE`] then).
    Denied {
        units: u64,
        blocked_until: Option<Nanos>,
    },
    /// `units` used, in the usage history only: a delegate's ask, decided
    /// from budget its home counted (SPEC §12). It changed no counter.
    UsedOnly { units: u64 },
    /// A slice of `units` taken for a local budget: counted like an ask,
    /// its usage to come when it comes back spent.
    Sliced { units: u64 },
    /// A slice's refund: `units` given back into the window it was taken
    /// in (`taken_at`), `spent` of it used.
    Refunded(Refund),
    /// A hold reserved (SPEC §13): `units` counted at the record's time,
    /// kept until `ends_at`.
    HoldReserved {
        hold: &'r str,
        units: u64,
        ends_at: Nanos,
        end: End,
        slot: bool,
    },
    /// A hold's end moved to `ends_at`.
    HoldExtended { hold: &'r str, ends_at: Nanos },
    /// A hold settled or ended: `back` given back (its `taken_at`: when
    /// the hold was reserved), `back.spent` used.
    HoldEnded { hold: &'r str, back: Refund },
    /// An ask's id remembered (SPEC §16), beside the ask's count of
    /// `cost` in the same turn: it changes no counter.
    IdRemembered { cost: u64, named: &'r NamedOf<S> },
}

/// A record as a typed value ([`RecordOf::typed`]).
#[derive(Debug, PartialEq)]
pub struct Typed<'r, S> {
    pub kind: Kind<'r, S>,
    /// Whether it is usage (SPEC §9) as its kind says. Not ([`NOT_USAGE`])
    /// for what another region sent over the link (that region records
    /// the usage), a delegate's books of its share, and an id remembered.
    pub is_usage: bool,
}

// Copied whatever `S` is: they only borrow it.
impl<S> Clone for Kind<'_, S> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<S> Copy for Kind<'_, S> {}
impl<S> Clone for Typed<'_, S> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<S> Copy for Typed<'_, S> {}

impl<S: AsRef<str>> RecordOf<S> {
    /// What the record is: the one place that reads its fields'
    /// combinations. A record of several kinds' fields (none is written
    /// so) is read as the first of: an id, a use only, a denial, a hold's,
    /// a reset, a refund, a slice, a count.
    pub fn typed(&self) -> Typed<'_, S> {
        let units = self.c;
        let kind = if let Some(named) = &self.i {
            Kind::IdRemembered { cost: units, named }
        } else if self.v == USED_ONLY {
            Kind::UsedOnly { units }
        } else if self.d {
            Kind::Denied {
                units,
                blocked_until: (self.e != 0).then_some(Nanos(self.e)),
            }
        } else if let Some(hold) = &self.h {
            let hold = hold.as_ref();
            if self.s {
                Kind::HoldReserved {
                    hold,
                    units,
                    ends_at: Nanos(self.e),
                    end: if self.x & RELEASE != 0 {
                        End::Release
                    } else {
                        End::Charge
                    },
                    slot: self.x & SLOT != 0,
                }
            } else if self.g != 0 {
                Kind::HoldEnded {
                    hold,
                    back: self.given_back(),
                }
            } else {
                Kind::HoldExtended {
                    hold,
                    ends_at: Nanos(self.e),
                }
            }
        } else if self.r {
            Kind::Reset
        } else if self.g != 0 {
            Kind::Refunded(self.given_back())
        } else if self.s {
            Kind::Sliced { units }
        } else {
            Kind::Counted { units }
        };
        Typed {
            kind,
            is_usage: self.v != NOT_USAGE,
        }
    }

    fn given_back(&self) -> Refund {
        Refund {
            units: self.c,
            spent: self.u,
            taken_at: Nanos(self.g),
        }
    }

    /// The partition it is of.
    pub fn partition(&self) -> u32 {
        self.n
    }

    /// The policy's name.
    pub fn policy(&self) -> &str {
        self.p.as_ref()
    }

    /// The key token.
    pub fn key(&self) -> &str {
        self.k.as_ref()
    }

    /// When it was made (the owner's clock).
    pub fn at(&self) -> Nanos {
        Nanos(self.t)
    }

    /// The turn that made it (0: none, a journal of an earlier release).
    pub fn turn(&self) -> u64 {
        self.q
    }

    /// Marks it as made in `turn` (its message's group, or the turn that
    /// made it).
    pub fn set_turn(&mut self, turn: u64) {
        self.q = turn;
    }

    /// Marks it as not usage ([`NOT_USAGE`]): counted here, sent over the
    /// link by another region, which records its usage.
    pub fn set_not_usage(&mut self) {
        self.v = NOT_USAGE;
    }

    /// The journal format of the oldest message that holds it
    /// ([`crate::journal::format_of`]).
    pub fn format(&self) -> u32 {
        if self.i.as_ref().is_some_and(|named| named.start != 0) {
            format::JOURNAL
        } else if self.i.is_some() {
            format::JOURNAL_IDS
        } else if self.q != 0 {
            format::JOURNAL_TURNS
        } else if self.v != 0 {
            format::JOURNAL_USAGE
        } else if self.h.is_some() || self.e != 0 {
            // A blocked key's denial has a field holds brought.
            format::JOURNAL_HOLDS
        } else if self.is_count() {
            format::JOURNAL_COUNTS
        } else {
            format::JOURNAL_SLICES
        }
    }

    /// Its encoded size, at most: its fields of at most 9 bytes, a 5-byte
    /// string header for each of its strings, and the strings.
    pub fn encoded_len_bound(&self) -> usize {
        let hold = self.h.as_ref().map_or(0, |h| 5 + h.as_ref().len());
        1 + self.fields() * 9 + 2 * 5 + self.policy().len() + self.key().len() + hold
    }
}

impl Record {
    /// A record of `c` units of `k` under `p` at `t`: a count
    /// ([`Kind::Counted`]).
    pub fn new(n: u32, p: &str, k: &str, c: u64, t: Nanos) -> Record {
        Record {
            n,
            p: p.to_string(),
            k: k.to_string(),
            c,
            t: t.as_u64(),
            r: false,
            d: false,
            s: false,
            g: 0,
            u: 0,
            h: None,
            e: 0,
            x: 0,
            v: 0,
            i: None,
            q: 0,
        }
    }

    /// [`Kind::Counted`].
    pub fn counted(n: u32, policy: &str, key: &str, units: u64, at: Nanos) -> Record {
        Record::new(n, policy, key, units, at)
    }

    /// [`Kind::Counted`], not usage: a delegate's books of its share.
    pub fn booked(n: u32, policy: &str, key: &str, units: u64, at: Nanos) -> Record {
        Record {
            v: NOT_USAGE,
            ..Record::new(n, policy, key, units, at)
        }
    }

    /// [`Kind::Reset`].
    pub fn reset(n: u32, policy: &str, key: &str, at: Nanos) -> Record {
        Record {
            r: true,
            ..Record::new(n, policy, key, 0, at)
        }
    }

    /// [`Kind::Denied`].
    pub fn denied(n: u32, policy: &str, key: &str, units: u64, at: Nanos) -> Record {
        Record {
            d: true,
            ..Record::new(n, policy, key, units, at)
        }
    }

    /// [`Kind::Denied`] of a key blocked until `until` (SPEC §18): what
    /// replay needs to block it again. Read as a plain denial by releases
    /// before blocks (a denial's `e` was never read).
    pub fn blocked(n: u32, policy: &str, key: &str, units: u64, at: Nanos, until: Nanos) -> Record {
        Record {
            e: until.as_u64(),
            ..Record::denied(n, policy, key, units, at)
        }
    }

    /// [`Kind::UsedOnly`].
    pub fn used_only(n: u32, policy: &str, key: &str, units: u64, at: Nanos) -> Record {
        Record {
            v: USED_ONLY,
            ..Record::new(n, policy, key, units, at)
        }
    }

    /// [`Kind::Sliced`].
    pub fn sliced(n: u32, policy: &str, key: &str, units: u64, at: Nanos) -> Record {
        Record {
            s: true,
            ..Record::new(n, policy, key, units, at)
        }
    }

    /// [`Kind::Refunded`] (a `taken_at` of 0 is written as 1: `g` is
    /// nonzero in every refund).
    pub fn refunded(n: u32, policy: &str, key: &str, back: &Refund, at: Nanos) -> Record {
        Record {
            g: back.taken_at.as_u64().max(1),
            u: back.spent,
            ..Record::new(n, policy, key, back.units, at)
        }
    }

    /// [`Kind::HoldReserved`], at the hold's `taken_at`.
    pub fn hold_reserved(n: u32, policy: &str, key: &str, hold: &Hold) -> Record {
        Record {
            c: hold.units,
            s: true,
            ..Record::of_hold(n, (policy, key), hold, hold.taken_at)
        }
    }

    /// [`Kind::HoldExtended`] to the hold's `ends_at`.
    pub fn hold_extended(n: u32, policy: &str, key: &str, hold: &Hold, at: Nanos) -> Record {
        Record::of_hold(n, (policy, key), hold, at)
    }

    /// [`Kind::HoldEnded`], `back` given back.
    pub fn hold_ended(
        n: u32,
        (policy, key): (&str, &str),
        hold: &Hold,
        back: &Refund,
        at: Nanos,
    ) -> Record {
        Record {
            c: back.units,
            g: hold.taken_at.as_u64().max(1),
            u: back.spent,
            ..Record::of_hold(n, (policy, key), hold, at)
        }
    }

    /// A record of `hold` at `at`, its counts left for the caller.
    fn of_hold(n: u32, (policy, key): (&str, &str), hold: &Hold, at: Nanos) -> Record {
        Record {
            h: Some(hold.id.to_string()),
            e: hold.ends_at.as_u64(),
            x: if hold.end == End::Release { RELEASE } else { 0 }
                | if hold.slot { SLOT } else { 0 },
            ..Record::new(n, policy, key, 0, at)
        }
    }

    /// [`Kind::IdRemembered`]: the id of an ask of `cost`, not usage.
    pub fn id_remembered(
        n: u32,
        (policy, key): (&str, &str),
        cost: u64,
        named: NamedOf<String>,
        at: Nanos,
    ) -> Record {
        Record {
            v: NOT_USAGE,
            i: Some(named),
            ..Record::new(n, policy, key, cost, at)
        }
    }
}

impl<S> RecordOf<S> {
    /// A plain count: encoded as its first five fields only, as every
    /// release since journal format 2 reads it.
    pub fn is_count(&self) -> bool {
        self.fields() == 5
    }

    /// How many fields it is encoded as (see [`RecordOf`]).
    pub fn fields(&self) -> usize {
        if self.i.is_some() {
            15
        } else if self.v != 0 {
            14
        } else if self.h.is_some() || self.e != 0 {
            // A hold's, or a blocked key's denial (SPEC §18): up to `x`.
            13
        } else if self.g != 0 || self.u != 0 {
            10
        } else if self.s {
            8
        } else if self.d {
            7
        } else if self.r {
            6
        } else {
            5
        }
    }
}

impl<T: Serialize> Serialize for RecordOf<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let fields = self.fields();
        let mut st = s.serialize_struct("Record", fields)?;
        st.serialize_field("n", &self.n)?;
        st.serialize_field("p", &self.p)?;
        st.serialize_field("k", &self.k)?;
        st.serialize_field("c", &self.c)?;
        st.serialize_field("t", &self.t)?;
        if fields > 5 {
            st.serialize_field("r", &self.r)?;
        }
        if fields > 6 {
            st.serialize_field("d", &self.d)?;
        }
        if fields > 7 {
            st.serialize_field("s", &self.s)?;
        }
        if fields > 8 {
            st.serialize_field("g", &self.g)?;
            st.serialize_field("u", &self.u)?;
        }
        if fields > 10 {
            st.serialize_field("h", &self.h)?;
            st.serialize_field("e", &self.e)?;
            st.serialize_field("x", &self.x)?;
        }
        if fields > 13 {
            st.serialize_field("v", &self.v)?;
        }
        if fields > 14 {
            st.serialize_field("i", &self.i)?;
        }
        st.end()
    }
}

impl RecordRef<'_> {
    pub fn to_owned(self) -> Record {
        Record {
            n: self.n,
            p: self.p.to_string(),
            k: self.k.to_string(),
            c: self.c,
            t: self.t,
            r: self.r,
            d: self.d,
            s: self.s,
            g: self.g,
            u: self.u,
            h: self.h.map(str::to_string),
            e: self.e,
            x: self.x,
            v: self.v,
            i: self.i.map(|n| NamedOf {
                id: n.id.to_string(),
                verb: n.verb.to_string(),
                held: n.held,
                remaining: n.remaining,
                limit: n.limit,
                reset: n.reset,
                until: n.until,
                start: n.start,
            }),
            q: self.q,
        }
    }
}

#[cfg(test)]
mod tests;
