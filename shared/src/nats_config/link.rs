//! How regions are linked (CONTRACT §12; docs/REGIONS.md, "Topology"):
//! the part of a region's nats-server config that names its region and
//! joins it to the others.
//!
//! Each region is its own NATS system with its own JetStream **domain**
//! (the region's name), and regions are joined by **leafnode** links: one
//! side listens (`--link-listen`), the other connects (`--link
//! REGION=URL`). We chose leafnodes over a gateway supercluster because a
//! supercluster has one JetStream meta group across all regions: a region
//! cut off from its majority cannot create consumers, so a worker
//! restarted there could not watch its leases and take its partitions
//! (regions-research §3.3, measured). With a domain per region, a cut-off
//! region keeps all of JetStream to itself.
//!
//! The link carries only [`LINK_ROOT`]'s subjects: the connecting side
//! denies everything of sluice's and of JetStream in both directions
//! ([`LINK_DENIED`]), so no ask, reply, count, lease, snapshot or queue
//! group (the unmapped-key and top-keys groups would otherwise fail over
//! to another region) crosses. With `--auth`, the link authenticates with
//! an nkey of its own, and the listening side lets that key publish and
//! subscribe to link subjects only; roles hold in every region, since the
//! link is the only way between them.

use super::quote::quote;
use crate::region::RegionName;
use crate::subject::{INTERNAL_ROOT, LINK_ROOT, ROOT};
use std::fmt;

/// What the connecting side of a link refuses to send or receive: every
/// subject of sluice's but [`LINK_ROOT`]'s, JetStream's and KV's (each
/// region has its own), the micro services' and the clients' inboxes
/// (a link request's reply comes to a link inbox).
pub fn link_denied() -> Vec<String> {
    vec![
        format!("{ROOT}.>"),
        format!("{INTERNAL_ROOT}.>"),
        "$JS.>".to_string(),
        "$KV.>".to_string(),
        "$O.>".to_string(),
        "$SRV.>".to_string(),
        "_INBOX.>".to_string(),
    ]
}

/// The subjects the link carries, for the link key's permissions.
pub fn link_allowed() -> Vec<String> {
    vec![format!("{LINK_ROOT}.>")]
}

/// A region's place among the regions: its name (the JetStream domain)
/// and its links.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegionLinks {
    pub region: RegionName,
    /// Where this server accepts the other regions' links, `host:port`.
    pub listen: Option<String>,
    /// The address the other regions are told to reconnect to, when they
    /// reach this server through a proxy or NAT (`host:port`); the listen
    /// address otherwise.
    pub advertise: Option<String>,
    /// The regions this server connects to, with their link listener's
    /// URL (`nats-leaf://host:7422`).
    pub connect: Vec<(RegionName, String)>,
    /// With `--auth`: the link's own key.
    pub key: Option<LinkKey>,
}

/// The nkey the regions' servers authenticate their links with: the
/// listening side names the public key (not a secret), the connecting
/// side signs with the seed.
#[derive(Clone, PartialEq, Eq)]
pub struct LinkKey {
    /// `U...`: the public user key.
    pub public: String,
    pub seed: LinkSeed,
}

/// Where the connecting side gets the seed from.
#[derive(Clone, PartialEq, Eq)]
pub enum LinkSeed {
    /// Written into the config.
    Literal(String),
    /// `nkey: $SLUICE_AUTH_LINK_SEED`, resolved by nats-server from its
    /// environment when it loads the file, so the file holds no secret.
    FromEnv,
}

/// The variable that holds the link's nkey seed.
pub const LINK_SEED_ENV: &str = "SLUICE_AUTH_LINK_SEED";

/// The seed is never shown.
impl fmt::Debug for LinkKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LinkKey")
            .field("public", &self.public)
            .field("seed", &"***")
            .finish()
    }
}

impl RegionLinks {
    /// The `leafnodes { }` block, if this server has any link.
    pub(super) fn render_leafnodes(&self, w: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.listen.is_none() && self.connect.is_empty() {
            return Ok(());
        }
        writeln!(
            w,
            "\n# The links to other regions (leafnodes; docs/REGIONS.md). They carry only\n\
             # {LINK_ROOT}.> subjects: the connecting side denies everything else of\n\
             # sluice's and JetStream's both ways, so asks, counts, leases and\n\
             # snapshots never leave region {}. Links must form a tree: no loops.",
            self.region
        )?;
        writeln!(w, "leafnodes {{")?;
        if let Some(listen) = &self.listen {
            writeln!(w, "  listen: {}", quote(listen))?;
            if let Some(advertise) = &self.advertise {
                writeln!(w, "  advertise: {}", quote(advertise))?;
            }
        }
        if !self.connect.is_empty() {
            let denied: Vec<String> = link_denied().iter().map(|s| quote(s)).collect();
            let denied = denied.join(", ");
            writeln!(w, "  remotes: [")?;
            for (region, url) in &self.connect {
                writeln!(w, "    # to region {region}")?;
                writeln!(w, "    {{")?;
                writeln!(w, "      urls: [{}]", quote(url))?;
                match self.key.as_ref().map(|k| &k.seed) {
                    Some(LinkSeed::Literal(seed)) => writeln!(w, "      nkey: {}", quote(seed))?,
                    Some(LinkSeed::FromEnv) => writeln!(w, "      nkey: ${LINK_SEED_ENV}")?,
                    None => {}
                }
                writeln!(w, "      deny_imports: [{denied}]")?;
                writeln!(w, "      deny_exports: [{denied}]")?;
                writeln!(w, "    }}")?;
            }
            writeln!(w, "  ]")?;
        }
        writeln!(w, "}}")
    }

    /// The link key's entry in `authorization { users }` on a server that
    /// accepts links with `--auth` (nothing otherwise): it may use link
    /// subjects and nothing else.
    pub(super) fn render_link_user(&self, w: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (Some(key), Some(_)) = (&self.key, &self.listen) else {
            return Ok(());
        };
        let allowed: Vec<String> = link_allowed().iter().map(|s| quote(s)).collect();
        let allowed = allowed.join(", ");
        writeln!(
            w,
            "    # link: the other regions' servers (leafnode links), link subjects only"
        )?;
        writeln!(w, "    {{")?;
        writeln!(w, "      nkey: {}", quote(&key.public))?;
        writeln!(w, "      permissions: {{")?;
        writeln!(w, "        publish: {{ allow: [{allowed}] }}")?;
        writeln!(w, "        subscribe: {{ allow: [{allowed}] }}")?;
        writeln!(w, "      }}")?;
        writeln!(w, "    }}")
    }
}
