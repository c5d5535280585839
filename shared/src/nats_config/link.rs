//! How regions are linked (SPEC §12; docs/REGIONS.md, "Topology"):
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
//! link is the only way between them. With certificates
//! ([`LinkTls`]), the link runs over TLS: the listener presents its
//! certificate and, given a CA, requires one signed by it from each region
//! that connects (mutual TLS); the connecting side verifies the
//! listener's against that CA.

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
    /// With `--link-tls-*`: the link's TLS.
    pub tls: Option<LinkTls>,
}

/// The files of the link's TLS, read by nats-server when it loads the
/// config (PEM). Built by [`LinkTls::new`], which refuses a half-given
/// pair.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkTls {
    /// This server's certificate and its key: presented to the regions
    /// that connect to it, and to the one it connects to when that one
    /// asks for a certificate.
    pub identity: Option<CertAndKey>,
    /// The CA the other regions' certificates are signed by. The listener
    /// then requires and verifies a certificate from each region that
    /// connects (`verify: true`), and the connecting side verifies the
    /// listener's against it instead of the system's roots.
    pub ca: Option<String>,
}

/// A certificate file and its key file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertAndKey {
    pub cert: String,
    pub key: String,
}

/// Why link TLS settings were refused; each says what to give instead.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LinkTlsError {
    #[error(
        "the link's certificate needs its key: give --link-tls-cert and --link-tls-key together"
    )]
    HalfPair,
    #[error("--link-tls-* secure the link between regions: give --link-listen or --link too")]
    NoLink,
    #[error("--link-listen over TLS needs this server's certificate: give --link-tls-cert and --link-tls-key")]
    ListenerWithoutCertificate,
}

impl LinkTls {
    /// The link's TLS from the certificate, its key and the CA as given
    /// (`None`: no TLS), for a server that listens for links (`listens`)
    /// and/or connects to others (`connects`).
    pub fn new(
        cert: Option<String>,
        key: Option<String>,
        ca: Option<String>,
        listens: bool,
        connects: bool,
    ) -> Result<Option<LinkTls>, LinkTlsError> {
        let identity = match (cert, key) {
            (Some(cert), Some(key)) => Some(CertAndKey { cert, key }),
            (None, None) => None,
            _ => return Err(LinkTlsError::HalfPair),
        };
        if identity.is_none() && ca.is_none() {
            return Ok(None);
        }
        if !listens && !connects {
            return Err(LinkTlsError::NoLink);
        }
        if listens && identity.is_none() {
            return Err(LinkTlsError::ListenerWithoutCertificate);
        }
        Ok(Some(LinkTls { identity, ca }))
    }

    /// The listener's `tls { }` block.
    fn render_listener(&self, w: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(w, "  tls {{")?;
        self.render_files(w, "    ")?;
        if self.ca.is_some() {
            writeln!(
                w,
                "    # mutual TLS: each region that connects shows a certificate of this CA"
            )?;
            writeln!(w, "    verify: true")?;
        }
        writeln!(w, "    timeout: 5")?;
        writeln!(w, "  }}")
    }

    /// A remote's `tls { }` block.
    fn render_remote(&self, w: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(w, "      tls {{")?;
        self.render_files(w, "        ")?;
        writeln!(w, "        timeout: 5")?;
        writeln!(w, "      }}")
    }

    fn render_files(&self, w: &mut fmt::Formatter<'_>, indent: &str) -> fmt::Result {
        if let Some(identity) = &self.identity {
            writeln!(w, "{indent}cert_file: {}", quote(&identity.cert))?;
            writeln!(w, "{indent}key_file: {}", quote(&identity.key))?;
        }
        if let Some(ca) = &self.ca {
            writeln!(w, "{indent}ca_file: {}", quote(ca))?;
        }
        Ok(())
    }
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
            if let Some(tls) = &self.tls {
                tls.render_listener(w)?;
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
                if let Some(tls) = &self.tls {
                    tls.render_remote(w)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nats_config::NatsServerConfig;

    fn some(s: &str) -> Option<String> {
        Some(s.to_string())
    }

    fn tls(
        cert: bool,
        key: bool,
        ca: bool,
        listens: bool,
        connects: bool,
    ) -> Result<Option<LinkTls>, LinkTlsError> {
        LinkTls::new(
            cert.then(|| "c.pem".to_string()),
            key.then(|| "k.pem".to_string()),
            ca.then(|| "ca.pem".to_string()),
            listens,
            connects,
        )
    }

    #[test]
    fn half_given_or_pointless_tls_is_refused_with_what_to_give() {
        assert_eq!(
            tls(true, false, true, true, false),
            Err(LinkTlsError::HalfPair)
        );
        assert_eq!(
            tls(false, true, false, false, true),
            Err(LinkTlsError::HalfPair)
        );
        assert_eq!(
            tls(true, true, true, false, false),
            Err(LinkTlsError::NoLink)
        );
        assert_eq!(
            tls(false, false, true, true, true),
            Err(LinkTlsError::ListenerWithoutCertificate)
        );
        assert_eq!(tls(false, false, false, true, true), Ok(None));
        // A connecting side may verify the listener without a certificate of its own.
        let only_ca = tls(false, false, true, false, true).unwrap().unwrap();
        assert_eq!((only_ca.identity, only_ca.ca), (None, some("ca.pem")));
        assert!(LinkTlsError::HalfPair
            .to_string()
            .contains("--link-tls-key"));
    }

    fn rendered(listen: bool, connect: bool, tls: Option<LinkTls>) -> String {
        let mut config = NatsServerConfig::new(16);
        config.region = Some(RegionLinks {
            region: RegionName::new("west").unwrap(),
            listen: listen.then(|| "0.0.0.0:7422".to_string()),
            advertise: None,
            connect: if connect {
                vec![(
                    RegionName::new("east").unwrap(),
                    "nats-leaf://east:7422".to_string(),
                )]
            } else {
                Vec::new()
            },
            key: None,
            tls,
        });
        let text = config.render();
        let start = text.find("leafnodes {").expect("a leafnodes block");
        text[start..].to_string()
    }

    #[test]
    fn the_listener_and_each_remote_get_a_tls_block_with_the_files() {
        let mutual = LinkTls::new(
            some("/c/w.pem"),
            some("/c/w-key.pem"),
            some("/c/ca.pem"),
            true,
            true,
        )
        .unwrap();
        let text = rendered(true, true, mutual);
        assert_eq!(text.matches("tls {").count(), 2, "{text}");
        assert_eq!(text.matches("cert_file: \"/c/w.pem\"").count(), 2, "{text}");
        assert_eq!(
            text.matches("key_file: \"/c/w-key.pem\"").count(),
            2,
            "{text}"
        );
        assert_eq!(text.matches("ca_file: \"/c/ca.pem\"").count(), 2, "{text}");
        // Only the listener asks for the other side's certificate.
        assert_eq!(text.matches("verify: true").count(), 1, "{text}");
        let listener = &text[..text.find("remotes").unwrap()];
        assert!(listener.contains("verify: true"), "{text}");

        let server_only =
            LinkTls::new(some("/c/e.pem"), some("/c/e-key.pem"), None, true, false).unwrap();
        let text = rendered(true, false, server_only);
        assert!(text.contains("cert_file: \"/c/e.pem\""), "{text}");
        assert!(!text.contains("verify"), "{text}");

        assert!(!rendered(true, true, None).contains("tls"));
    }
}
