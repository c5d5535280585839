//! Every NATS subject sluice uses, built and parsed here and nowhere else.
//!
//! Clients send to `rl.<verb>.<key>` (SPEC §1, §2, §8, §9). The NATS
//! server rewrites those, with its own deterministic partition function, to
//! `rl.p.<n>.<verb>.<key>`, `n < partitions`, which is what the owning worker
//! subscribes to ([`crate::nats_config`] renders that mapping). So clients
//! never learn about partitions and no request takes an extra hop. The
//! batching client bypasses the mapping on purpose: it sends to
//! `rl.p.<n>.batch` or, once it knows a partition's owner,
//! `rl.w.<worker-id>.batch`.
//!
//! Why one module: a subject is spelled by whoever sends and parsed by
//! whoever receives, often in different crates; a typo on one side is a
//! request that silently reaches no one. Building and parsing side by side
//! keeps the two in step, and the tests in `shared/tests/nats_config.rs` pin
//! the strings.

use crate::partition::partition_of;

/// The first token of every public sluice subject.
pub const ROOT: &str = "rl";
/// Subject prefix of decision requests: `rl.allow.<key>` (SPEC §1).
pub const ALLOW_PREFIX: &str = "rl.allow";
/// Subject prefix of counted hits: `rl.hit.<key>` (SPEC §2).
pub const HIT_PREFIX: &str = "rl.hit";
/// Prefix of the per-partition subjects the server maps onto:
/// `rl.p.<n>.<verb>.<key>`.
pub const PARTITION_PREFIX: &str = "rl.p";
/// Prefix of the per-worker subjects (`rl.w.<worker-id>.batch`), internal.
pub const WORKER_PREFIX: &str = "rl.w";
/// The top-keys query (SPEC §9). Not under `rl.usage.`, which the
/// mapping sends to one key's owner.
pub const TOP: &str = "rl.top";
/// Where the worker that took an `rl.top` asks every worker for its
/// partitions' share (internal).
pub const TOP_SCATTER: &str = "sluice.top";
/// The last token of a batch subject.
const BATCH: &str = "batch";

/// What a per-key subject asks for: the token after `rl.` (SPEC §1, §2,
/// §8, §9). One enum for the verbs: the subjects, the worker's decision
/// core and the clients' local limiter all use it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verb {
    /// `rl.allow.<key>`: request-reply for a decision.
    Allow,
    /// `rl.hit.<key>`: publish, count whether or not it fits.
    Hit,
    /// `rl.inspect.<key>`: a key's state, consuming nothing (SPEC §8).
    Inspect,
    /// `rl.reset.<key>`: forget a key's counters (SPEC §8).
    Reset,
    /// `rl.usage.<key>`: a key's usage history (SPEC §9).
    Usage,
    /// `rl.reserve.<key>`: decide and hold a cost (SPEC §13).
    Reserve,
    /// `rl.settle.<key>`: end a hold with its real cost (SPEC §13).
    Settle,
    /// `rl.extend.<key>`: keep a live hold longer (SPEC §13).
    Extend,
}

impl Verb {
    /// Every per-key verb of the contract.
    pub const ALL: [Verb; 8] = [
        Verb::Allow,
        Verb::Hit,
        Verb::Inspect,
        Verb::Reset,
        Verb::Usage,
        Verb::Reserve,
        Verb::Settle,
        Verb::Extend,
    ];

    /// The verbs workers answer today, so the ones the server maps onto
    /// partitions ([`crate::nats_config::mapping`]) and a partition's owner
    /// subscribes to.
    pub const ANSWERED: [Verb; 8] = Verb::ALL;

    /// The verbs of holds (SPEC §13).
    pub const HOLDS: [Verb; 3] = [Verb::Reserve, Verb::Settle, Verb::Extend];

    /// The verb's token in subjects: `allow`, `hit`, ...
    pub const fn as_str(self) -> &'static str {
        match self {
            Verb::Allow => "allow",
            Verb::Hit => "hit",
            Verb::Inspect => "inspect",
            Verb::Reset => "reset",
            Verb::Usage => "usage",
            Verb::Reserve => "reserve",
            Verb::Settle => "settle",
            Verb::Extend => "extend",
        }
    }

    /// The verb named `token` ([`Verb::as_str`]), if any.
    pub fn parse(token: &str) -> Option<Verb> {
        Verb::ALL.into_iter().find(|v| v.as_str() == token)
    }

    /// `rl.allow`, `rl.hit`, ...: the prefix clients send under.
    pub const fn client_prefix(self) -> &'static str {
        match self {
            Verb::Allow => ALLOW_PREFIX,
            Verb::Hit => HIT_PREFIX,
            Verb::Inspect => "rl.inspect",
            Verb::Reset => "rl.reset",
            Verb::Usage => "rl.usage",
            Verb::Reserve => "rl.reserve",
            Verb::Settle => "rl.settle",
            Verb::Extend => "rl.extend",
        }
    }

    /// The subject a client sends to: `rl.allow.<key>`, `rl.hit.<key>`, ...
    /// `key_token` must already be one encoded subject token (see
    /// [`crate::key`]).
    pub fn client_subject(self, key_token: &str) -> String {
        format!("{}.{key_token}", self.client_prefix())
    }

    /// `rl.allow.*` for a key of one token, `rl.allow.*.*` and
    /// `rl.allow.*.*.*` for grouped keys (SPEC §17): the client subjects of
    /// this verb with keys of `tokens` tokens (a mapping's source).
    pub fn client_wildcard(self, tokens: usize) -> String {
        format!("{}{}", self.client_prefix(), ".*".repeat(tokens))
    }

    /// `rl.allow.>`: what the mapping cannot map (a key of more tokens
    /// than [`crate::key::MAX_TOKENS`]), for the worker that answers those with an
    /// error.
    pub fn unmapped_wildcard(self) -> String {
        format!("{}.>", self.client_prefix())
    }

    /// The subscription of partition `partition`'s owner for this verb:
    /// `rl.p.<n>.allow.>`, `rl.p.<n>.hit.>`, ... (a key of one token or a
    /// grouped one).
    pub fn partition_subject(self, partition: u32) -> String {
        self.mapped_subject(partition, ">")
    }

    /// `rl.p.<n>.allow.<key>`: what the mapping makes of
    /// [`Verb::client_subject`] when `key_token` is in `partition`.
    pub fn mapped_subject(self, partition: u32, key_token: &str) -> String {
        on_partition(partition, format_args!("{}.{key_token}", self.as_str()))
    }

    /// `rl.p.*.allow.<key>`: where `key_token` arrives, whatever its
    /// partition (the mapping probe listens there).
    pub fn any_partition_subject(self, key_token: &str) -> String {
        on_partition("*", format_args!("{}.{key_token}", self.as_str()))
    }

    /// The mapping's destination with `partitions` partitions for keys of
    /// `tokens` tokens: `rl.p.{{partition(N,1)}}.allow.{{wildcard(1)}}`,
    /// then `.{{wildcard(2)}}`... The partition is the first token's alone,
    /// so every key of a group lives with its group.
    pub fn mapped_destination(self, partitions: u32, tokens: usize) -> String {
        let wildcards: Vec<String> = (1..=tokens)
            .map(|i| format!("{{{{wildcard({i})}}}}"))
            .collect();
        format!(
            "{PARTITION_PREFIX}.{{{{partition({partitions},1)}}}}.{}.{}",
            self.as_str(),
            wildcards.join(".")
        )
    }
}

/// `rl.p.<partition>.allow.>`: what a partition's owner subscribes to for decisions.
pub fn allow_subject(partition: u32) -> String {
    Verb::Allow.partition_subject(partition)
}

/// `rl.p.<partition>.hit.>`: what a partition's owner subscribes to for hits.
pub fn hit_subject(partition: u32) -> String {
    Verb::Hit.partition_subject(partition)
}

/// The subject on which the owner of `partition` takes batched asks from the
/// batching client (`sluice_core::wire::batch` payloads). Batches bypass the
/// server's mapping: the client computes the partition itself.
pub fn batch_subject(partition: u32) -> String {
    on_partition(partition, BATCH)
}

/// `rl.p.*.batch`: the batch subject of every partition (for a stand-in
/// responder that answers batches whatever their partition).
pub fn any_partition_batch_subject() -> String {
    on_partition("*", BATCH)
}

/// `rl.p.<n>.>`: everything sent to partition `partition`, asks of every
/// verb and batches (for an observer that counts what reaches a partition).
pub fn partition_wildcard(partition: u32) -> String {
    on_partition(partition, ">")
}

/// `rl.p.<partition>.<rest>`: the one spelling of a per-partition subject
/// (`partition` may be `*`).
fn on_partition(partition: impl std::fmt::Display, rest: impl std::fmt::Display) -> String {
    format!("{PARTITION_PREFIX}.{partition}.{rest}")
}

/// The subject on which worker `worker_id` takes batches whose items may
/// belong to any of its partitions (same payloads as [`batch_subject`]). The
/// batching client learns which worker owns a partition from the
/// [`crate::wire::batch::WORKER_HEADER`] of batch replies, so one request
/// carries the asks of all of that worker's partitions.
pub fn worker_batch_subject(worker_id: &str) -> String {
    format!("{WORKER_PREFIX}.{worker_id}.{BATCH}")
}

/// Every subject a partition's owner subscribes to: one per answered verb
/// and the partition's batch subject.
pub fn owner_subjects(partition: u32) -> Vec<String> {
    owner_subjects_of(partition)
}

/// [`owner_subjects`] of every partition at once (`rl.p.*.allow.>`, ...),
/// for the echo responder that stands in for all workers in benchmarks.
pub fn every_owner_subject() -> Vec<String> {
    owner_subjects_of("*")
}

fn owner_subjects_of(partition: impl std::fmt::Display + Copy) -> Vec<String> {
    Verb::ANSWERED
        .into_iter()
        .map(|verb| on_partition(partition, format_args!("{}.>", verb.as_str())))
        .chain([on_partition(partition, BATCH)])
        .collect()
}

/// Whether `id` can name a worker: it is a NATS subject token (and a KV
/// key), 1 to 64 characters of `A-Z`, `a-z`, `0-9`, `_` and `-`.
pub fn is_valid_worker_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Whether a worker may publish a reply to `subject`, the reply subject a
/// request came with. Replies never go into sluice's own subjects (`rl.`,
/// `sluice.`) nor to any `$` subject (`$JS.API`, `$KV`, `$SRV`, `$SYS`):
/// a worker may publish there (leases, snapshots, journal), so a request
/// whose reply subject named, say, `$KV.sluice-leases.p.3` or
/// `rl.p.3.reset.bob` would otherwise have the worker write its reply
/// there for the asker, with the worker's permissions (docs/SECURITY.md).
/// Every NATS client's inboxes (`_INBOX.`, or a custom prefix) pass.
pub fn is_safe_reply_subject(subject: &str) -> bool {
    let own = |prefix: &str| {
        subject
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
    };
    !(subject.starts_with('$') || own(ROOT) || own(INTERNAL_ROOT) || own(LINK_ROOT))
}

/// The first token of sluice's internal subjects (`sluice.journal.>`,
/// `sluice.status.>`).
pub const INTERNAL_ROOT: &str = "sluice";

/// The first token of the subjects that cross between regions (SPEC
/// §12), and the only ones the link between regions carries
/// ([`crate::nats_config::link`]): `sluice-link.<region>.…`, addressed to
/// the workers of `<region>`. Every other subject stays in its region.
pub const LINK_ROOT: &str = "sluice-link";

/// The link subjects of `region`'s workers: `sluice-link.<region>.>`.
pub fn link_wildcard(region: &str) -> String {
    format!("{LINK_ROOT}.{region}.>")
}

/// Where a worker of `region` takes link requests from other regions
/// that need an answer from `region` itself: `sluice-link.<region>.hello`
/// (who is there; SPEC §12's `sluice status`).
pub fn link_hello(region: &str) -> String {
    format!("{LINK_ROOT}.{region}.hello")
}

/// Every region's workers answer here: one request sees which regions the
/// link reaches.
pub fn link_hello_all() -> String {
    format!("{LINK_ROOT}.hello")
}

/// The inbox prefix of a worker's link connection in `region`: replies
/// to its requests across the link come back under its own region's link
/// subjects, the only ones the link carries.
pub fn link_inbox_prefix(region: &str) -> String {
    format!("{LINK_ROOT}.{region}.inbox")
}

/// Whether a link request's reply subject is a link inbox
/// (`sluice-link.<region>.inbox.…`): the only replies a worker sends
/// across the link, as ordinary asks' replies never go into link subjects
/// ([`is_safe_reply_subject`]).
pub fn is_link_reply_subject(subject: &str) -> bool {
    let mut tokens = subject.split('.');
    tokens.next() == Some(LINK_ROOT)
        && tokens.next().is_some_and(|r| !r.is_empty())
        && tokens.next() == Some("inbox")
        && tokens.next().is_some_and(|t| !t.is_empty())
}

/// The subjects a partition's owner in `region` takes from other regions'
/// owners for a global limit (SPEC §12, [`crate::region::global`]), one
/// per [`LinkInbound`] kind: `sluice-link.<region>.p.<n>.batch` (slices
/// asked and given back, as the batch of [`batch_subject`]),
/// `sluice-link.<region>.p.<n>.hit.*` (a hit that found no budget there)
/// and `sluice-link.<region>.p.<n>.reclaim` (the home asks for a share
/// back), and the rest below.
pub fn link_partition_subjects(region: &str, partition: u32) -> Vec<String> {
    vec![
        link_batch(region, partition),
        format!(
            "{LINK_ROOT}.{region}.p.{partition}.{}.*",
            Verb::Hit.as_str()
        ),
        format!(
            "{LINK_ROOT}.{region}.p.{partition}.{}.*",
            Verb::Allow.as_str()
        ),
        format!(
            "{LINK_ROOT}.{region}.p.{partition}.{}.*",
            Verb::Reset.as_str()
        ),
        format!(
            "{LINK_ROOT}.{region}.p.{partition}.{}.*",
            Verb::Inspect.as_str()
        ),
        link_reclaim(region, partition),
        link_give(region, partition),
        link_answered(region, partition),
        link_tally(region, partition),
        link_resend(region, partition),
    ]
}

/// `sluice-link.<region>.p.<n>.batch`.
pub fn link_batch(region: &str, partition: u32) -> String {
    format!("{LINK_ROOT}.{region}.p.{partition}.{BATCH}")
}

/// `sluice-link.<region>.p.<n>.hit.<key>`.
pub fn link_hit(region: &str, partition: u32, key_token: &str) -> String {
    link_ask(region, partition, Verb::Hit, key_token)
}

/// `sluice-link.<region>.p.<n>.<verb>.<key>`: an ask (`allow`) or a hit
/// another region's owner sends the home's owner of partition `n`.
pub fn link_ask(region: &str, partition: u32, verb: Verb, key_token: &str) -> String {
    format!(
        "{LINK_ROOT}.{region}.p.{partition}.{}.{key_token}",
        verb.as_str()
    )
}

/// `sluice-link.<region>.p.<n>.reclaim`.
pub fn link_reclaim(region: &str, partition: u32) -> String {
    format!("{LINK_ROOT}.{region}.p.{partition}.{RECLAIM}")
}

const RECLAIM: &str = "reclaim";

/// `sluice-link.<region>.p.<n>.give`: units another region took out of
/// its part of a global bucket for the home's (`sluice_core::region::parts`).
pub fn link_give(region: &str, partition: u32) -> String {
    format!("{LINK_ROOT}.{region}.p.{partition}.{GIVE}")
}

const GIVE: &str = "give";

/// `sluice-link.<region>.p.<n>.answered`: the home answered an ask this
/// region's owner of partition `n` forwarded (a policy decided at the
/// home); published within the region by the owner's own link task, so
/// that the owner records the ask's usage where it was made.
pub fn link_answered(region: &str, partition: u32) -> String {
    format!("{LINK_ROOT}.{region}.p.{partition}.{ANSWERED}")
}

const ANSWERED: &str = "answered";

/// `sluice-link.<home>.p.<n>.tally`: what another region spent of keys
/// whose home is `<home>`, for their alerts (`sluice_core::region::tally`).
pub fn link_tally(region: &str, partition: u32) -> String {
    format!("{LINK_ROOT}.{region}.p.{partition}.{TALLY}")
}

const TALLY: &str = "tally";

/// `sluice-link.<region>.p.<n>.resend`: a home's new owner of partition
/// `n` asks `<region>`'s owner to report its tallies again.
pub fn link_resend(region: &str, partition: u32) -> String {
    format!("{LINK_ROOT}.{region}.p.{partition}.{RESEND}")
}

const RESEND: &str = "resend";

/// A request another region's owner sent to one of this region's
/// partitions ([`link_partition_subjects`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkInbound<'a> {
    Batch(u32),
    /// A hit, an ask of a policy decided at the home, or a global key's
    /// reset.
    Ask(PartitionSubject<'a>),
    Reclaim(u32),
    /// A gift (the subject's verb is `give`).
    Gift(u32),
    Answered(u32),
    Tally(u32),
    Resend(u32),
}

impl<'a> LinkInbound<'a> {
    /// `None` for anything but a partition subject of `region`'s.
    pub fn parse(subject: &'a str, region: &str) -> Option<LinkInbound<'a>> {
        let rest = subject
            .strip_prefix(LINK_ROOT)?
            .strip_prefix('.')?
            .strip_prefix(region)?
            .strip_prefix(".p.")?;
        let mut tokens = rest.splitn(3, '.');
        let partition = tokens.next()?;
        if partition.is_empty() || !partition.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let partition: u32 = partition.parse().ok()?;
        match (tokens.next()?, tokens.next()) {
            (BATCH, None) => Some(LinkInbound::Batch(partition)),
            (RECLAIM, None) => Some(LinkInbound::Reclaim(partition)),
            (GIVE, None) => Some(LinkInbound::Gift(partition)),
            (ANSWERED, None) => Some(LinkInbound::Answered(partition)),
            (TALLY, None) => Some(LinkInbound::Tally(partition)),
            (RESEND, None) => Some(LinkInbound::Resend(partition)),
            (verb, Some(key_token)) if !key_token.is_empty() && !key_token.contains('.') => {
                let verb = [Verb::Hit, Verb::Allow, Verb::Reset, Verb::Inspect]
                    .into_iter()
                    .find(|v| v.as_str() == verb)?;
                Some(LinkInbound::Ask(PartitionSubject {
                    partition,
                    verb,
                    key_token,
                }))
            }
            _ => None,
        }
    }

    /// The partition the subject is of.
    pub fn partition(&self) -> u32 {
        match self {
            LinkInbound::Ask(ask) => ask.partition,
            LinkInbound::Batch(p)
            | LinkInbound::Reclaim(p)
            | LinkInbound::Gift(p)
            | LinkInbound::Answered(p)
            | LinkInbound::Tally(p)
            | LinkInbound::Resend(p) => *p,
        }
    }
}

/// Within a region: every worker answers with its region's identity, so a
/// worker starting up sees whether regional subjects leak over a link
/// that carries more than [`LINK_ROOT`] (a hand-written link config).
pub const REGION_HELLO: &str = "sluice.region.hello";

/// The first tokens of every alert subject (SPEC §14).
const ALERT_PREFIX: &str = "rl.alert";

/// `rl.alert.<policy>.<key>`: where an alert of `policy` for the key token
/// `key_token` is published (SPEC §14).
pub fn alert_subject(policy: &str, key_token: &str) -> String {
    format!("{ALERT_PREFIX}.{policy}.{key_token}")
}

/// The alerts of `policy` (`rl.alert.<policy>.>`: a grouped key has
/// several tokens), or of every policy
/// (`rl.alert.>`), to follow or to read from the stream.
pub fn alert_filter(policy: Option<&str>) -> String {
    match policy {
        Some(p) => format!("{ALERT_PREFIX}.{p}.>"),
        None => format!("{ALERT_PREFIX}.>"),
    }
}

/// The NATS micro service every worker registers (`$SRV.PING.sluice-worker`).
pub const STATUS_SERVICE: &str = "sluice-worker";
/// The service group of the workers' status endpoints:
/// `sluice.status.<worker-id>`.
pub const STATUS_GROUP: &str = "sluice.status";

/// `$SRV.PING.sluice-worker`: every worker answers.
pub fn status_ping() -> String {
    format!("$SRV.PING.{STATUS_SERVICE}")
}

/// `$SRV.STATS.sluice-worker.<service-id>`: one worker's status.
pub fn status_stats(service_id: &str) -> String {
    format!("$SRV.STATS.{STATUS_SERVICE}.{service_id}")
}

/// A per-partition subject as a worker receives it: `rl.p.<n>.<verb>.<key>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartitionSubject<'a> {
    pub partition: u32,
    pub verb: Verb,
    /// The key token as sent, still percent-encoded.
    pub key_token: &'a str,
}

impl<'a> PartitionSubject<'a> {
    /// Splits a received subject; `None` if it is not a per-partition
    /// subject with a decimal partition number, a known verb and a key.
    /// Whether the key is acceptable (e.g. not `*`, at most
    /// [`crate::key::MAX_TOKENS`] tokens) is for the key decoder to say.
    pub fn parse(subject: &'a str) -> Option<PartitionSubject<'a>> {
        match Inbound::parse(subject)? {
            Inbound::Ask(ask) => Some(ask),
            Inbound::PartitionBatch(_) => None,
        }
    }
}

/// What a partition's owner receives on the subjects of [`owner_subjects`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inbound<'a> {
    /// `rl.p.<n>.<verb>.<key>`: one ask, mapped by the server.
    Ask(PartitionSubject<'a>),
    /// `rl.p.<n>.batch`: a batch of asks for partition `n`.
    PartitionBatch(u32),
}

impl<'a> Inbound<'a> {
    /// `None` for anything else (another prefix, a partition number that is
    /// not plain decimal, an unknown verb, no key). A key of several tokens
    /// is a grouped key's ([`crate::key`]), checked by its decoder.
    pub fn parse(subject: &'a str) -> Option<Inbound<'a>> {
        let rest = subject.strip_prefix(PARTITION_PREFIX)?.strip_prefix('.')?;
        let mut tokens = rest.splitn(3, '.');
        let partition = tokens.next()?;
        if partition.is_empty() || !partition.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let partition: u32 = partition.parse().ok()?;
        let second = tokens.next()?;
        let Some(key_token) = tokens.next() else {
            return (second == BATCH).then_some(Inbound::PartitionBatch(partition));
        };
        let verb = Verb::parse(second)?;
        if key_token.is_empty() {
            return None;
        }
        Some(Inbound::Ask(PartitionSubject {
            partition,
            verb,
            key_token,
        }))
    }
}

/// The start-up check that the server maps keys onto the partitions this
/// process computes: its pure part, shared by the worker and the client
/// (whose gateway uses it too).
///
/// The checker subscribes to [`probe::arrival_subject`] for a few unique
/// keys (and, to tell "no mapping" apart, may also listen on the unmapped
/// subject), publishes `rl.allow.<key>` *without* a reply subject (workers
/// ignore such asks, so nothing is counted), and hands every arrival to
/// [`probe::check`]. Eight probes catch a wrong partition count with
/// probability at least 1 - 2^-8, for about one round trip.
pub mod probe {
    use super::{partition_of, PartitionSubject, Verb};

    /// How many probe keys a check sends.
    pub const PROBES: usize = 8;

    /// The prefix of the client's probe keys.
    pub const CLIENT_PREFIX: &str = "sluice-client-probe";

    /// The probe keys of clients and gateways: always the same
    /// `sluice-client-probe-0` .. `-7`, so that the `client` role of `sluice
    /// nats-config --auth` can let clients subscribe to exactly their
    /// arrival subjects and no other partition subject. (Fixed keys land on
    /// fixed partitions, so a wrong count is caught for most, not all, pairs
    /// of counts; a batch that reaches the wrong worker is still answered
    /// item by item, see [`crate::wire::batch`].) Clients checking at the
    /// same time see each other's probes, which check the same thing.
    pub fn client_keys() -> Vec<String> {
        (0..PROBES)
            .map(|i| format!("{CLIENT_PREFIX}-{i}"))
            .collect()
    }

    /// `PROBES` keys unique to this check (`nonce` makes them so).
    pub fn keys(prefix: &str, nonce: &str) -> Vec<String> {
        (0..PROBES)
            .map(|i| format!("{prefix}-{nonce}-{i}"))
            .collect()
    }

    /// Where a probe key sent to `rl.allow.<key>` arrives once mapped.
    pub fn arrival_subject(key: &str) -> String {
        Verb::Allow.any_partition_subject(key)
    }

    /// Where a probe is published: through the mapping, like any ask.
    pub fn send_subject(key: &str) -> String {
        Verb::Allow.client_subject(key)
    }

    /// An arrival on another partition than this process computes.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct Mismatch {
        pub key: String,
        /// Where the server put it (`None`: a subject that is no mapped ask).
        pub arrived: Option<u32>,
        /// Where `partition_of` puts it.
        pub expected: u32,
    }

    /// Checks one arrival against `partitions`.
    pub fn check(arrival: &str, partitions: u32) -> Result<(), Mismatch> {
        let parsed = PartitionSubject::parse(arrival);
        let key = parsed
            .map(|p| p.key_token)
            .unwrap_or_else(|| arrival.rsplit('.').next().unwrap_or_default());
        let expected = partition_of(key, partitions);
        match parsed {
            Some(p) if p.partition == expected => Ok(()),
            _ => Err(Mismatch {
                key: key.to_string(),
                arrived: parsed.map(|p| p.partition),
                expected,
            }),
        }
    }
}

#[cfg(test)]
mod tests;
