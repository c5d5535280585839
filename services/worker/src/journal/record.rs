//! The journal's record: one counted request, as journal mode stores it
//! before it answers and a new owner replays it at takeover.
//!
//! Its encoding is the journal's format (`sluice_core::format::JOURNAL`):
//! an array of fields of which only those up to the last one set are
//! written, so that every release reads the records of the ones before.
//! Pure data, no I/O: the decision core builds records, [`crate::journal`]
//! stores and reads them.

use serde::{Deserialize, Serialize};
use sluice_core::holds::HoldId;
use sluice_core::time::Nanos;

/// One counted request: what journal mode stores before it answers
/// (encoded here; [`crate::journal`] stores and reads them), and replays at takeover.
///
/// Encoded as an array of its fields in this order; the trailing ones only
/// up to the last one set (`[n, p, k, c, t]` for a count, `[.., t, true]`
/// for a reset, `[.., t, false, true]` for a denial, `[.., false, false,
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
    /// is recorded: it changed no counter and replay changes none.
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
    /// A hold's end (ns since the epoch): at its reserve and extends.
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

impl Record {
    /// A record of `c` units of `k` under `p` at `t`: a count, unless
    /// the caller marks it otherwise.
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
}

impl<S> RecordOf<S> {
    /// Whether it is a hold's (then the message is of the newest format).
    pub fn is_hold(&self) -> bool {
        self.h.is_some()
    }

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
        } else if self.h.is_some() {
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
            }),
            q: self.q,
        }
    }
}
