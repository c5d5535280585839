//! The nats-server config that maps sluice's subjects onto partitions
//! (SPEC §3, §5: `sluice nats-config`). The subjects themselves are
//! spelled in [`crate::subject`].
//!
//! Clients publish to `rl.allow.<key>` and `rl.hit.<key>`. The NATS server
//! rewrites those, with its own deterministic partition function, to
//! `rl.p.<n>.allow.<key>` and `rl.p.<n>.hit.<key>`, `n < partitions`, which is
//! what the owning worker subscribes to. So clients never learn about
//! partitions and no request takes an extra hop. This module renders the
//! mapping that links them ([`mapping`], [`NatsServerConfig::render`]).
//!
//! The server applies a mapping only to messages that arrive from a client or
//! leaf connection, using the config of the server that connection is on,
//! and it never rewrites subscriptions: workers must subscribe to the
//! per-partition subjects, and every server of a cluster (and every leaf
//! node) must carry the same mapping, or keys silently land on different
//! partitions depending on where their publisher is connected.

use crate::config::DEFAULT_PARTITIONS;
use crate::key::MAX_TOKENS;
use crate::subject::Verb;
use crate::usage::UsageConfig;
use std::fmt;

pub mod auth;
pub mod link;
mod quote;
pub use auth::{permissions, Password, Permissions, Role, RoleUser};
pub use link::{CertAndKey, LinkKey, LinkSeed, LinkTls, LinkTlsError, RegionLinks};
use quote::quote;

/// The server mappings for `verb` with `partitions` partitions, as (source,
/// destination), one per key length: `("rl.allow.*",
/// "rl.p.{{partition(N,1)}}.allow.{{wildcard(1)}}")`, then the grouped
/// keys' `rl.allow.*.*` and `rl.allow.*.*.*` (SPEC §17).
///
/// `partition(N,1)` hashes only the key's first token (FNV-1a mod N, see
/// [`crate::partition`]), not the whole subject, so `rl.allow.k` and
/// `rl.hit.k` land on the same partition, and so do `rl.allow.acme` and
/// `rl.allow.acme.eng.alice`.
pub fn mapping(verb: Verb, partitions: u32) -> Vec<(String, String)> {
    (1..=MAX_TOKENS)
        .map(|tokens| {
            (
                verb.client_wildcard(tokens),
                verb.mapped_destination(partitions, tokens),
            )
        })
        .collect()
}

/// The largest message the rendered config lets through: 8 MiB (the
/// server's default is 1 MiB). A usage record holds every key a partition
/// counted in its bucket, a day's for the daily tier (docs/USAGE.md,
/// "Limits"): 1 MiB is ~40,000 short keys, a day of a busy partition may
/// hold more. 8 MiB is the most NATS recommends.
pub const MAX_PAYLOAD: u64 = 8 << 20;

/// A nats-server config file for sluice: listen address, JetStream, the
/// partition mapping, and optionally a cluster block.
///
/// [`render`](NatsServerConfig::render) writes the file; nats-server's own
/// flags (`-p`, `-js`, `-sd`) override what it sets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NatsServerConfig {
    /// Must equal `partitions` in sluice's config.
    pub partitions: u32,
    /// Must differ on every server of a cluster (JetStream refuses to start
    /// clustered without one).
    pub server_name: String,
    /// Client listen address, `host:port`.
    pub listen: String,
    /// Monitoring HTTP listen address (`/varz`, `/accountz`, ...); off if `None`.
    pub http: Option<String>,
    /// JetStream's directory; `None` leaves it to nats-server, which uses a
    /// directory under the system's temp dir.
    pub store_dir: Option<String>,
    /// The largest message the server takes, in bytes ([`MAX_PAYLOAD`]).
    pub max_payload: u64,
    /// JetStream memory storage limit in bytes; `None`: the server's default.
    pub max_memory_store: Option<u64>,
    /// JetStream file storage limit in bytes; `None`: the server's default.
    pub max_file_store: Option<u64>,
    /// Present for the cluster form.
    pub cluster: Option<Cluster>,
    /// One user per role (SPEC §10, [`auth`]); empty: no authorization,
    /// anyone who reaches the server may do anything.
    pub users: Vec<RoleUser>,
    /// The steps of the workers' usage tiers (`1m`, ...), which name their
    /// streams, for the `worker` role's permissions.
    pub usage_steps: Vec<String>,
    /// The server's region and its links to other regions (SPEC §12,
    /// [`link`]); `None`: a system of one region.
    pub region: Option<RegionLinks>,
}

/// The `cluster { }` block of one server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cluster {
    /// The cluster's name, the same on every server.
    pub name: String,
    /// Route listen address, `host:port`, e.g. `0.0.0.0:6222`.
    pub listen: String,
    /// Route URLs of the servers, e.g. `nats-route://n1:6222`. Listing the
    /// server itself is harmless (it drops that route as a duplicate), so
    /// every server can be given the same list.
    pub routes: Vec<String>,
}

impl Default for NatsServerConfig {
    fn default() -> NatsServerConfig {
        NatsServerConfig::new(DEFAULT_PARTITIONS)
    }
}

impl NatsServerConfig {
    /// A single server on `127.0.0.1:4222` named `sluice`, JetStream with the
    /// server's default directory and limits, messages up to [`MAX_PAYLOAD`],
    /// no monitoring, no cluster.
    pub fn new(partitions: u32) -> NatsServerConfig {
        NatsServerConfig {
            partitions,
            server_name: "sluice".to_string(),
            listen: "127.0.0.1:4222".to_string(),
            http: None,
            store_dir: None,
            max_payload: MAX_PAYLOAD,
            max_memory_store: None,
            max_file_store: None,
            cluster: None,
            users: Vec::new(),
            usage_steps: UsageConfig::default()
                .tiers
                .iter()
                .map(|t| t.name())
                .collect(),
            region: None,
        }
    }

    /// The config file's text (the same as its `Display`).
    pub fn render(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for NatsServerConfig {
    fn fmt(&self, w: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.partitions;
        writeln!(
            w,
            "# nats-server config for sluice, printed by `sluice nats-config`.\n\
             #\n\
             # It maps the subjects clients use (rl.allow.<key>, rl.hit.<key>,\n\
             # rl.usage.<key>, and rl.inspect.<key>, rl.reset.<key> for operators)\n\
             # onto {n} per-partition subjects (rl.p.<n>.allow.<key>, ...) with the\n\
             # server's own partition function, and enables JetStream, which sluice\n\
             # uses for partition leases, counter snapshots and usage history.\n\
             #\n\
             # nats-server's command-line flags override this file: -p PORT, -js, -sd DIR.\n\
             # Check it with: nats-server -t -c FILE\n"
        )?;
        writeln!(w, "server_name: {}", quote(&self.server_name))?;
        writeln!(w, "listen: {}", quote(&self.listen))?;
        if let Some(http) = &self.http {
            writeln!(w, "http: {}  # monitoring", quote(http))?;
        }
        writeln!(
            w,
            "\n# A usage record holds every key one partition counted in one bucket (a\n\
             # day, for the daily tier) and must fit in one message: the default of\n\
             # 1 MiB holds about 40,000 short keys, 8 MiB eight times as many."
        )?;
        let max_payload = self.max_payload;
        writeln!(
            w,
            "max_payload: {max_payload}  # {}",
            human_bytes(max_payload)
        )?;

        writeln!(w, "\njetstream {{")?;
        if let Some(links) = &self.region {
            writeln!(
                w,
                "  # One JetStream domain per region: a region cut off from the others\n  \
                 # keeps its own leases, snapshots and journal (docs/REGIONS.md)."
            )?;
            writeln!(w, "  domain: {}", quote(links.region.as_str()))?;
        }
        match &self.store_dir {
            Some(dir) => {
                writeln!(w, "  store_dir: {}", quote(dir))?;
            }
            None => {
                writeln!(
                    w,
                    "  # store_dir is not set: nats-server uses a directory under the system's\n  \
                     # temp dir. Set one (or pass -sd DIR) to keep snapshots across reboots."
                )?;
            }
        }
        for (name, bytes) in [
            ("max_memory_store", self.max_memory_store),
            ("max_file_store", self.max_file_store),
        ] {
            if let Some(bytes) = bytes {
                writeln!(w, "  {name}: {bytes}  # {}", human_bytes(bytes))?;
            }
        }
        writeln!(w, "}}")?;

        writeln!(
            w,
            "\n# The partition mapping. N in partition(N,1) must equal `partitions` in\n\
             # sluice's config ({n}); the partition is FNV-1a of the key's first token mod N\n\
             # (a grouped key, org.key or org.team.key, lives with its org).\n\
             # Every server in a cluster, and every leaf node, must carry these exact\n\
             # mappings: a message is mapped by the server its publisher is connected\n\
             # to, with that server's config, and a server with another N (or none)\n\
             # sends keys to other partitions (or to no one) without any warning.\n\
             # Changing N moves most keys to another partition, where they start over.\n\
             # These apply to the default account ($G); with accounts configured, put\n\
             # this block into every account whose clients use sluice."
        )?;
        writeln!(w, "mappings = {{")?;
        for verb in Verb::ANSWERED {
            for (from, to) in mapping(verb, n) {
                writeln!(w, "  {}: {}", quote(&from), quote(&to))?;
            }
        }
        writeln!(w, "}}")?;

        if !self.users.is_empty() {
            auth::render(w, &self.users, &self.usage_steps, self.region.as_ref())?;
        }
        if let Some(links) = &self.region {
            links.render_leafnodes(w)?;
        }

        if let Some(cluster) = &self.cluster {
            writeln!(
                w,
                "\n# Cluster: render this file once per server. server_name must differ on\n\
                 # every server (JetStream will not start clustered without it); the\n\
                 # cluster name and the mappings above must be the same everywhere. A\n\
                 # route to the server itself is dropped, so all servers can share routes."
            )?;
            writeln!(w, "cluster {{")?;
            writeln!(w, "  name: {}", quote(&cluster.name))?;
            writeln!(w, "  listen: {}", quote(&cluster.listen))?;
            writeln!(w, "  routes: [")?;
            for route in &cluster.routes {
                writeln!(w, "    {}", quote(route))?;
            }
            writeln!(w, "  ]")?;
            writeln!(w, "}}")?;
        }
        Ok(())
    }
}

/// `268435456` → `256 MiB`; sizes that are not a whole number of a binary
/// unit are shown in bytes.
fn human_bytes(bytes: u64) -> String {
    for (unit, size) in [
        ("TiB", 1u64 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ] {
        if bytes >= size && bytes.is_multiple_of(size) {
            return format!("{} {unit}", bytes / size);
        }
    }
    format!("{bytes} bytes")
}

/// The servers named by a `--nats` value: one URL, or several separated by
/// commas (`nats://n1:4222,nats://n2:4222`), so clients and workers of a
/// cluster can fail over between its nodes.
pub fn server_urls(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

#[cfg(test)]
mod server_url_tests {
    use super::server_urls;

    #[test]
    fn one_or_several_comma_separated_urls() {
        assert_eq!(server_urls("nats://a:4222"), ["nats://a:4222"]);
        assert_eq!(
            server_urls("nats://a:4222, nats://b:4222,"),
            ["nats://a:4222", "nats://b:4222"]
        );
    }
}
