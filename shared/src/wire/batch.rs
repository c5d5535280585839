//! Batches: several asks for keys of one partition in one NATS request.
//!
//! The batching client groups concurrent asks by partition (computed with
//! [`crate::partition`]) and sends each group as one request to the owning
//! worker, which answers them all in one reply. Which subject carries a
//! batch is the worker's choice; this module is only the payloads.
//!
//! Batches are internal, MessagePack only, and mirror the single-request
//! format: a map `{"items": [item, ...]}`, where each item is a map with
//! `key` (the canonical key token, required), `policy` and `cost` (optional,
//! same defaults and rules as a single request). The reply is a map
//! `{"results": [result, ...]}` with one result per item, in item order,
//! each a decision map or an error map exactly as a single reply body would
//! be. Items are decided in order, as if sent one after the other.
//!
//! An item is an ask (`rl.allow`) unless it names a hold's `verb`
//! (`reserve`, `settle` or `extend`, SPEC §13): then it takes that
//! verb's fields (`hold`, `ttl_ms`, and `cost` as the verb does) under the
//! same rules as the verb's own body ([`super::hold`]), and its result is
//! what the verb's own reply would be, `hold` and `expires_ms` included.
//! A worker of a release before hold items refuses a batch with one as a
//! whole (unknown field `"verb"`), changing nothing.
//!
//! The functions are named for what a batch carries, so that none shares a
//! name with the single-request functions of [`crate::wire`]:
//! [`encode_items`] / [`decode_items`] for the request (client / worker),
//! [`encode_results`] / [`decode_results`] for the reply (worker / client).
//!
//! Errors are split in two, so one bad key does not sink its neighbours:
//! - A body that is not a well-formed batch (not a map, unknown fields,
//!   wrong types, too many items, too large) is refused as a whole with a
//!   plain error reply; the client fails every item in it. These are bugs
//!   of the batching client, so they should be loud.
//! - An item whose key token, policy name or cost is invalid gets an error
//!   in its own slot; the other items are decided.
//!
//! Every batch reply names the worker that decided it in the header
//! [`WORKER_HEADER`], so a client learns partition owners from any batch
//! reply and can send the asks of all of one worker's partitions together
//! (`rl.w.<worker-id>.batch`, see [`crate::subject::worker_batch_subject`]).
//!
//! Because a batch bypasses the server's mapping, the worker must check that
//! every key belongs to the partition the batch was sent to (and answer
//! that item with an error if not): otherwise a client configured with a
//! different partition count would split counters.

use super::encoding::Encoding;
use super::error::{quoted, ErrorCode, ErrorReply};
use super::fields::{duplicate, read_msgpack_field, read_msgpack_name, Fields, Scalar, MAX_COST};
use super::hold::{self, HoldFields};
use super::msgpack::{Reader, Value, Writer};
use super::reply::{encode_reply_body, error_reply, MalformedReply, RawReply, Reply, ReplyBody};
use super::request::encode_body;
use crate::budget::Refund;
use crate::holds::HoldId;
use crate::key::KeyToken;
use crate::subject::Verb;
use crate::time::Nanos;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

/// The header of a batch reply naming the worker that decided it.
pub const WORKER_HEADER: &str = "Sluice-Worker";

/// The most items one batch may carry.
pub const MAX_ITEMS: usize = 256;
/// The largest batch body (256 items of the longest key and policy name fit).
pub const MAX_BODY: usize = 128 * 1024;

const ITEM_FIELDS: &str = "a batch item has only the fields \"key\" (a key token), \"policy\" (a string), \"cost\" (an unsigned integer), \"id\" (a string), for local budgets \"slice\", or \"refund\", \"spent\" and \"slice_at\" (unsigned integers), and for holds \"verb\" and \"hold\" (strings) and \"ttl_ms\" (an unsigned integer)";
const BATCH_FIELDS: &str = "a batch is a map with the one field \"items\" (an array of item maps)";

/// One ask or hold verb in a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item<'a> {
    pub key: KeyToken<'a>,
    pub policy: Cow<'a, str>,
    /// An ask's or a reserve's cost, a settle's real cost (an extend's is
    /// not sent).
    pub cost: u64,
    /// An ask's id (SPEC §16): counted once however often it is sent.
    pub id: Option<Cow<'a, str>>,
    pub act: Act,
}

/// What a batch item does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Act {
    /// An ask, as `rl.allow`, and what it does for a local budget.
    Ask(Budget),
    /// A hold's verb (SPEC §13), as its own subject would take it.
    Hold(HoldAct),
}

impl Default for Act {
    fn default() -> Act {
        Act::Ask(Budget::None)
    }
}

/// A hold verb in a batch: field `verb`, and the fields that verb takes
/// besides `policy` and `cost` (checked as [`super::hold`] checks them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HoldAct {
    /// One of [`Verb::HOLDS`].
    pub verb: Verb,
    /// Reserve and extend: the ttl asked for (else the policy's).
    pub ttl_ms: Option<u64>,
    /// Settle and extend: the hold.
    pub hold: Option<HoldId>,
}

/// What a batch item does besides its ask: local budgets
/// ([`crate::budget`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Budget {
    #[default]
    None,
    /// Field `slice`: with the ask (cost at least 1), a slice of up to
    /// this many units; the reply's decision carries the grant, if the
    /// policy has local budgets.
    Slice(u64),
    /// Fields `refund`, `spent` and `slice_at`: a slice's unspent units
    /// given back (the item's cost is 0; its reply is a peek's).
    Refund(Refund),
}

/// Encodes a batch request (client side). Every field is written.
pub fn encode_items(items: &[Item<'_>]) -> Vec<u8> {
    #[derive(Serialize)]
    struct ItemOut<'a> {
        key: &'a str,
        policy: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        cost: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        slice: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        refund: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        spent: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        slice_at: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        verb: Option<&'static str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        hold: Option<HoldId>,
        #[serde(skip_serializing_if = "Option::is_none")]
        ttl_ms: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        id: Option<&'a str>,
    }
    #[derive(Serialize)]
    struct BatchOut<'a> {
        items: Vec<ItemOut<'a>>,
    }
    let items = items
        .iter()
        .map(|i| {
            let (budget, hold) = match i.act {
                Act::Ask(budget) => (budget, None),
                Act::Hold(hold) => (Budget::None, Some(hold)),
            };
            let refund = match budget {
                Budget::Refund(r) => Some(r),
                _ => None,
            };
            ItemOut {
                key: i.key.as_str(),
                policy: &i.policy,
                cost: match hold {
                    Some(HoldAct {
                        verb: Verb::Extend, ..
                    }) => None,
                    _ => Some(i.cost),
                },
                slice: match budget {
                    Budget::Slice(want) => Some(want),
                    _ => None,
                },
                refund: refund.map(|r| r.units),
                spent: refund.map(|r| r.spent),
                slice_at: refund.map(|r| r.taken_at.as_u64()),
                verb: hold.map(|h| h.verb.as_str()),
                hold: hold.and_then(|h| h.hold),
                ttl_ms: hold.and_then(|h| h.ttl_ms),
                id: i.id.as_deref(),
            }
        })
        .collect();
    encode_body(&BatchOut { items }, Encoding::MsgPack)
}

/// A decoded batch: each item valid, or refused with its own error reply.
pub type Items<'a> = Vec<Result<Item<'a>, ErrorReply>>;

/// Decodes a batch request (worker side): either the whole batch is refused,
/// or each item is valid or carries its own error reply.
pub fn decode_items(body: &[u8]) -> Result<Items<'_>, ErrorReply> {
    if body.len() > MAX_BODY {
        return Err(ErrorReply::new(
            ErrorCode::TooLarge,
            format!(
                "the batch body is {} bytes; the limit is {MAX_BODY} bytes",
                body.len()
            ),
        ));
    }
    if body.first() == Some(&b'{') {
        return Err(ErrorReply::bad_request(
            "batches are MessagePack only; this body looks like JSON",
        ));
    }
    let mut r = Reader::new(body);
    let entries = match r.next() {
        Ok(Value::Map(n)) => n,
        Ok(other) => {
            return Err(ErrorReply::bad_request(format!(
                "the batch body is {}, not a map; {BATCH_FIELDS}",
                other.type_name()
            )))
        }
        Err(e) => return Err(ErrorReply::bad_request(e.sentence())),
    };
    let mut items = None;
    for _ in 0..entries {
        let name = read_msgpack_name(&mut r, BATCH_FIELDS).map_err(ErrorReply::bad_request)?;
        if name != "items" {
            return Err(ErrorReply::bad_request(format!(
                "unknown field {}; {BATCH_FIELDS}",
                quoted(name)
            )));
        }
        if items.is_some() {
            return Err(ErrorReply::bad_request(duplicate("items")));
        }
        items = Some(read_items(&mut r)?);
    }
    let items = items.ok_or_else(|| {
        ErrorReply::bad_request(format!("the batch has no \"items\"; {BATCH_FIELDS}"))
    })?;
    if r.remaining() > 0 {
        return Err(ErrorReply::bad_request(format!(
            "the batch body has {} bytes after the end of its map; send exactly one map",
            r.remaining()
        )));
    }
    Ok(items)
}

fn read_items<'a>(r: &mut Reader<'a>) -> Result<Items<'a>, ErrorReply> {
    let n = match r.next() {
        Ok(Value::Array(n)) => n as usize,
        Ok(other) => {
            return Err(ErrorReply::bad_request(format!(
                "\"items\" must be an array of item maps, not {}",
                other.type_name()
            )))
        }
        Err(e) => return Err(ErrorReply::bad_request(e.sentence())),
    };
    if n > MAX_ITEMS {
        return Err(ErrorReply::new(
            ErrorCode::TooLarge,
            format!("the batch has {n} items; the limit is {MAX_ITEMS}"),
        ));
    }
    let mut items = Vec::with_capacity(n);
    for i in 0..n {
        let item =
            read_item(r).map_err(|m| ErrorReply::bad_request(format!("batch item {i}: {m}")))?;
        items.push(item);
    }
    Ok(items)
}

/// The outer `Result` is the structure (fatal for the batch); the inner one
/// the item's own validity.
fn read_item<'a>(r: &mut Reader<'a>) -> Result<Result<Item<'a>, ErrorReply>, String> {
    let n = match r.next() {
        Ok(Value::Map(n)) => n,
        Ok(other) => return Err(format!("an item must be a map, not {}", other.type_name())),
        Err(e) => return Err(e.sentence().to_string()),
    };
    let mut key = None;
    let mut fields = Fields::default();
    let mut budget = BudgetFields::default();
    let mut holding = HoldingFields::default();
    for _ in 0..n {
        // `key` and the budget's and holds' fields are read here, the
        // rest as in a single request. Peek at the name without consuming
        // it twice: read it, then dispatch.
        let mut probe = r.clone();
        let name = read_msgpack_name(&mut probe, ITEM_FIELDS)?;
        if let Some(slot) = budget.slot(name).or_else(|| holding.uint(name)) {
            *r = probe;
            if slot.is_some() {
                return Err(duplicate(name));
            }
            match Scalar::from(r.next().map_err(|e| e.sentence().to_string())?) {
                Scalar::Uint(u) => *slot = Some(u),
                other => {
                    return Err(format!(
                        "{} must be an unsigned integer, not {}",
                        quoted(name),
                        other.type_name()
                    ))
                }
            }
        } else if let Some(slot) =
            holding
                .text(name)
                .or(if name == "key" { Some(&mut key) } else { None })
        {
            *r = probe;
            if slot.is_some() {
                return Err(duplicate(name));
            }
            match r.next().map_err(|e| e.sentence().to_string())? {
                Value::Str(s) => *slot = Some(s),
                other => {
                    let what = if name == "key" { " (a key token)" } else { "" };
                    return Err(format!(
                        "{} must be a string{what}, not {}",
                        quoted(name),
                        Scalar::from(other).type_name()
                    ));
                }
            }
        } else {
            read_msgpack_field(r, &mut fields, ITEM_FIELDS)?;
        }
    }
    let key = key.ok_or_else(|| format!("the item has no \"key\"; {ITEM_FIELDS}"))?;
    Ok(validate(key, fields, budget, holding))
}

fn validate<'a>(
    key: &'a str,
    fields: Fields<'a>,
    budget: BudgetFields,
    holding: HoldingFields<'a>,
) -> Result<Item<'a>, ErrorReply> {
    let key = KeyToken::parse(key)?;
    if fields.waits() {
        return Err(ErrorReply::bad_request(
            "\"wait_ms\" is not taken in a batch in this version; send an ask that may wait alone, on rl.allow.<key>",
        ));
    }
    let Some(word) = holding.verb else {
        if holding.hold.is_some() || holding.ttl_ms.is_some() {
            return Err(ErrorReply::bad_request(
                "\"hold\" and \"ttl_ms\" come with a hold's \"verb\" (\"reserve\", \"settle\" or \"extend\"); an item without one is an ask",
            ));
        }
        let finished = fields.finish().map_err(ErrorReply::bad_request)?;
        let budget = budget
            .finish(finished.cost)
            .map_err(ErrorReply::bad_request)?;
        return Ok(Item {
            key,
            policy: finished.policy,
            cost: finished.cost,
            id: finished.id,
            act: Act::Ask(budget),
        });
    };
    let verb = Verb::HOLDS
        .into_iter()
        .find(|v| v.as_str() == word)
        .ok_or_else(|| {
            ErrorReply::bad_request(format!(
                "unknown verb {}; a batch item's \"verb\" is \"reserve\", \"settle\" or \"extend\", or none for an ask",
                quoted(word)
            ))
        })?;
    if budget.any() {
        return Err(ErrorReply::bad_request(format!(
            "a {} item takes no local budget fields (\"slice\", \"refund\", \"spent\", \"slice_at\")",
            verb.as_str()
        )));
    }
    let (policy, cost, id) = fields.into_sent();
    let checked = hold::check(
        verb,
        HoldFields {
            policy,
            cost,
            ttl_ms: holding.ttl_ms,
            hold: holding.hold,
            id,
            wait_ms: None,
        },
    )
    .map_err(ErrorReply::bad_request)?;
    Ok(Item {
        key,
        policy: checked.policy,
        cost: checked.cost,
        id: checked.id,
        act: Act::Hold(HoldAct {
            verb,
            ttl_ms: checked.ttl_ms,
            hold: checked.hold,
        }),
    })
}

/// The holds' fields of an item as read, before the checks.
#[derive(Default)]
struct HoldingFields<'a> {
    verb: Option<&'a str>,
    hold: Option<&'a str>,
    ttl_ms: Option<u64>,
}

impl<'a> HoldingFields<'a> {
    fn text(&mut self, name: &str) -> Option<&mut Option<&'a str>> {
        match name {
            "verb" => Some(&mut self.verb),
            "hold" => Some(&mut self.hold),
            _ => None,
        }
    }

    fn uint(&mut self, name: &str) -> Option<&mut Option<u64>> {
        (name == "ttl_ms").then_some(&mut self.ttl_ms)
    }
}

/// The budget fields of an item as read, before the checks that need them all.
#[derive(Default)]
struct BudgetFields {
    slice: Option<u64>,
    refund: Option<u64>,
    spent: Option<u64>,
    slice_at: Option<u64>,
}

impl BudgetFields {
    fn any(&self) -> bool {
        self.slice.is_some()
            || self.refund.is_some()
            || self.spent.is_some()
            || self.slice_at.is_some()
    }

    fn slot(&mut self, name: &str) -> Option<&mut Option<u64>> {
        match name {
            "slice" => Some(&mut self.slice),
            "refund" => Some(&mut self.refund),
            "spent" => Some(&mut self.spent),
            "slice_at" => Some(&mut self.slice_at),
            _ => None,
        }
    }

    fn finish(self, cost: u64) -> Result<Budget, String> {
        let sane = |name: &str, n: u64| {
            if n > MAX_COST {
                Err(format!(
                    "{name:?} {n} is absurd; no slice holds more than {MAX_COST}"
                ))
            } else {
                Ok(n)
            }
        };
        match (self.slice, self.refund, self.spent, self.slice_at) {
            (None, None, None, None) => Ok(Budget::None),
            (Some(want), None, None, None) => {
                if cost == 0 {
                    return Err("a \"slice\" comes with an ask of cost 1 or more, not a peek".into());
                }
                Ok(Budget::Slice(sane("slice", want)?))
            }
            (None, Some(units), Some(spent), Some(at)) => {
                if cost != 0 {
                    return Err(format!(
                        "a refund item gives units back and takes none: send \"cost\": 0, not {cost}"
                    ));
                }
                Ok(Budget::Refund(Refund {
                    units: sane("refund", units)?,
                    spent: sane("spent", spent)?,
                    taken_at: Nanos(at),
                }))
            }
            (Some(_), ..) => Err("an item either asks for a \"slice\" or gives one back (\"refund\"), not both".into()),
            _ => Err("a refund needs all of \"refund\" (units not spent), \"spent\" and \"slice_at\" (from the grant)".into()),
        }
    }
}

/// Encodes a batch reply (worker side): one result per item, in order.
pub fn encode_results(results: &[Reply]) -> Vec<u8> {
    #[derive(Serialize)]
    struct BatchReplyOut<'a> {
        results: &'a [Reply],
    }
    impl ReplyBody for BatchReplyOut<'_> {
        fn msgpack_len(&self) -> usize {
            let header = 1 + (1 + "results".len()) + 5;
            header + self.results.iter().map(Reply::msgpack_len).sum::<usize>()
        }

        fn write_msgpack(&self, w: &mut Writer) {
            w.map(1);
            w.str("results");
            let len = u32::try_from(self.results.len()).expect("at most MAX_ITEMS results");
            w.array(len);
            for result in self.results {
                result.write_msgpack(w);
            }
        }
    }
    encode_reply_body(&BatchReplyOut { results }, Encoding::MsgPack)
}

/// Why a batch got no per-item results.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    /// The worker refused the whole batch (the reply also has error headers).
    #[error("{0}")]
    Rejected(ErrorReply),
    #[error(transparent)]
    Malformed(#[from] MalformedReply),
}

/// Decodes a batch reply (client side); `items` is how many were sent, and
/// a reply with another number of results is malformed.
pub fn decode_results(body: &[u8], items: usize) -> Result<Vec<Reply>, ReplyError> {
    #[derive(Deserialize)]
    struct RawBatchReply {
        results: Option<Vec<RawReply>>,
        error: Option<String>,
        message: Option<String>,
    }
    let raw: RawBatchReply =
        rmp_serde::from_slice(body).map_err(|e| MalformedReply(e.to_string()))?;
    let Some(results) = raw.results else {
        let Some(word) = raw.error else {
            return Err(MalformedReply("the batch reply has no \"results\"".into()).into());
        };
        return Err(ReplyError::Rejected(error_reply(word, raw.message)?));
    };
    if results.len() != items {
        return Err(MalformedReply(format!(
            "the batch reply has {} results for {items} items",
            results.len()
        ))
        .into());
    }
    results
        .into_iter()
        .map(|r| r.into_reply().map_err(ReplyError::from))
        .collect()
}
