//! [`TwoRegions`]: two regions on loopback (SPEC §12), `east` and
//! `west`, each a [`Stack`] (its own nats-server, JetStream domain and
//! workers), linked as docs/REGIONS.md documents (a leafnode link carrying
//! only `sluice-link.>`) through a [`LinkProxy`] the test controls.
//!
//! Server names must differ across linked regions (a leafnode link
//! between two servers of one name is closed at once): `east-1`, `west-1`.
//! east listens for the link; west connects to it through the proxy.
//! east advertises the proxy's address, so west never learns east's own
//! link port and cannot reconnect around the proxy. The link may be
//! authenticated ([`TwoRegions::start_secured`]) and run over TLS
//! ([`TwoRegions::start_secured_over_tls`]).

use crate::cluster::free_ports;
use crate::eventually::{eventually, TICK};
use crate::link_proxy::LinkProxy;
use crate::stack::Stack;
use crate::tls::TestCa;
use anyhow::{bail, Result};
use sluice_core::nats_config::{
    CertAndKey, LinkKey, LinkSeed, LinkTls, NatsServerConfig, RegionLinks,
};
use sluice_core::region::RegionName;
use std::path::PathBuf;
use std::time::Duration;

/// The region that listens for the link.
pub const EAST: &str = "east";
/// The region that connects through the proxy.
pub const WEST: &str = "west";

/// Two linked regions; see the module docs.
pub struct TwoRegions {
    pub east: Stack,
    pub west: Stack,
    pub link: LinkProxy,
}

/// `config_toml` for `region`: the line `region = "<region>"` put first
/// (a TOML top-level key must come before the tables).
pub fn in_region(region: &str, config_toml: &str) -> String {
    format!("region = \"{region}\"\n{config_toml}")
}

impl TwoRegions {
    /// Starts both regions, each with `workers` workers of `sluice` on
    /// `config_toml` (put into each region by [`in_region`]), and waits
    /// until the link is up.
    pub async fn start(
        sluice: impl Into<PathBuf>,
        config_toml: &str,
        workers: usize,
    ) -> TwoRegions {
        TwoRegions::start_as(sluice.into(), config_toml, workers, LinkSecurity::default()).await
    }

    /// [`TwoRegions::start`] with the roles of SPEC §10 in each region
    /// ([`Stack::start_secured`]) and the link authenticated by the nkey
    /// whose seed is `link_seed` (`sluice nats-config --auth`).
    pub async fn start_secured(
        sluice: impl Into<PathBuf>,
        config_toml: &str,
        workers: usize,
        link_seed: &str,
    ) -> TwoRegions {
        let security = LinkSecurity {
            key: Some(link_key(link_seed)),
            tls: None,
        };
        TwoRegions::start_as(sluice.into(), config_toml, workers, security).await
    }

    /// [`TwoRegions::start_secured`] with the link over mutual TLS
    /// (`--link-tls-cert/-key/-ca`): east's listener presents `ca`'s
    /// server certificate and requires one of `ca`'s from west, which
    /// presents `ca`'s client certificate and verifies east's.
    pub async fn start_secured_over_tls(
        sluice: impl Into<PathBuf>,
        config_toml: &str,
        workers: usize,
        link_seed: &str,
        ca: &TestCa,
    ) -> TwoRegions {
        let tls = |cert: PathBuf, key: PathBuf| LinkTls {
            identity: Some(CertAndKey {
                cert: cert.display().to_string(),
                key: key.display().to_string(),
            }),
            ca: Some(ca.ca().display().to_string()),
        };
        let security = LinkSecurity {
            key: Some(link_key(link_seed)),
            tls: Some((
                tls(ca.server_cert(), ca.server_key()),
                tls(ca.client_cert(), ca.client_key()),
            )),
        };
        TwoRegions::start_as(sluice.into(), config_toml, workers, security).await
    }

    async fn start_as(
        sluice: PathBuf,
        config_toml: &str,
        workers: usize,
        security: LinkSecurity,
    ) -> TwoRegions {
        let link_port = free_ports(1).expect("a free port for the link")[0];
        let link = LinkProxy::start(([127, 0, 0, 1], link_port).into()).expect("the link proxy");
        let proxy = link.addr().to_string();
        let LinkSecurity { key, tls } = security;
        let (east_tls, west_tls) = tls.unzip();
        let east_links = |nats: &mut NatsServerConfig| {
            nats.server_name = format!("{EAST}-1");
            nats.region = Some(RegionLinks {
                region: RegionName::new(EAST).expect("a region name"),
                listen: Some(format!("127.0.0.1:{link_port}")),
                advertise: Some(proxy.clone()),
                connect: Vec::new(),
                key: key.clone(),
                tls: east_tls.clone(),
            })
        };
        let west_links = |nats: &mut NatsServerConfig| {
            linked_to_east(nats, WEST, &proxy, key.clone(), west_tls.clone())
        };
        let (east_toml, west_toml) = (in_region(EAST, config_toml), in_region(WEST, config_toml));
        let (east, west) = if key.is_some() {
            let east =
                Stack::start_secured_with_nats(sluice.clone(), &east_toml, workers, east_links)
                    .await;
            let west =
                Stack::start_secured_with_nats(sluice, &west_toml, workers, west_links).await;
            (east, west)
        } else {
            let east =
                Stack::start_with_nats(sluice.clone(), &east_toml, workers, east_links).await;
            let west = Stack::start_with_nats(sluice, &west_toml, workers, west_links).await;
            (east, west)
        };
        let regions = TwoRegions { east, west, link };
        regions
            .wait_linked(true)
            .await
            .expect("the regions link up");
        regions
    }

    /// Waits until the link is up (`true`) or down (`false`) as east's
    /// server sees it (`/leafz`).
    pub async fn wait_linked(&self, up: bool) -> Result<()> {
        eventually(Duration::from_secs(20), TICK, || async {
            let leafz = self.east.nats.monitoring_get("/leafz")?;
            let v: serde_json::Value = serde_json::from_str(&leafz)?;
            let linked = v["leafnodes"].as_u64().unwrap_or(0) > 0;
            if linked != up {
                bail!("east's leafnode links: {leafz}");
            }
            anyhow::Ok(())
        })
        .await
    }

    /// The config of a server of a third region, `region`, linked to east
    /// through the proxy as west is, with the link's `key` and `tls`: for
    /// tests of what east's listener accepts.
    pub fn third_region(
        &self,
        region: &str,
        key: Option<LinkKey>,
        tls: Option<LinkTls>,
    ) -> NatsServerConfig {
        let mut nats = NatsServerConfig::new(16);
        linked_to_east(&mut nats, region, &self.link.addr().to_string(), key, tls);
        nats
    }

    /// Messages east's server has sent west over the link so far, and
    /// received from it (`/leafz`'s `out_msgs`, `in_msgs`).
    pub fn link_messages(&self) -> Result<(u64, u64)> {
        let leafz = self.east.nats.monitoring_get("/leafz")?;
        let v: serde_json::Value = serde_json::from_str(&leafz)?;
        let sum = |field: &str| {
            v["leafs"]
                .as_array()
                .map(|ls| ls.iter().map(|l| l[field].as_u64().unwrap_or(0)).sum())
                .unwrap_or(0)
        };
        Ok((sum("out_msgs"), sum("in_msgs")))
    }
}

/// How the link between the regions is secured: its nkey (and then the
/// roles in each region) and its TLS, east's and west's.
#[derive(Default)]
struct LinkSecurity {
    key: Option<LinkKey>,
    tls: Option<(LinkTls, LinkTls)>,
}

/// The link's key from its seed, written into the config.
pub fn link_key(seed: &str) -> LinkKey {
    let pair = nkeys::KeyPair::from_seed(seed).expect("an nkey user seed");
    LinkKey {
        public: pair.public_key(),
        seed: LinkSeed::Literal(seed.to_string()),
    }
}

/// `region`'s server (`<region>-1`) linked to east through the proxy at
/// `proxy`, as west is.
fn linked_to_east(
    nats: &mut NatsServerConfig,
    region: &str,
    proxy: &str,
    key: Option<LinkKey>,
    tls: Option<LinkTls>,
) {
    nats.server_name = format!("{region}-1");
    nats.region = Some(RegionLinks {
        region: RegionName::new(region).expect("a region name"),
        listen: None,
        advertise: None,
        connect: vec![(
            RegionName::new(EAST).expect("a region name"),
            format!("nats-leaf://{proxy}"),
        )],
        key,
        tls,
    });
}
