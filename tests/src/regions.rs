//! [`TwoRegions`]: two regions on loopback (CONTRACT §12), `east` and
//! `west`, each a [`Stack`] (its own nats-server, JetStream domain and
//! workers), linked as docs/REGIONS.md documents (a leafnode link carrying
//! only `sluice-link.>`) through a [`LinkProxy`] the test controls.
//!
//! Server names must differ across linked regions (a leafnode link
//! between two servers of one name is closed at once): `east-1`, `west-1`.
//! east listens for the link; west connects to it through the proxy.
//! east advertises the proxy's address, so west never learns east's own
//! link port and cannot reconnect around the proxy.

use crate::cluster::free_ports;
use crate::eventually::{eventually, TICK};
use crate::link_proxy::LinkProxy;
use crate::stack::Stack;
use anyhow::{bail, Result};
use sluice_core::nats_config::{LinkKey, LinkSeed, NatsServerConfig, RegionLinks};
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
        TwoRegions::start_as(sluice.into(), config_toml, workers, None).await
    }

    /// [`TwoRegions::start`] with the roles of CONTRACT §10 in each region
    /// ([`Stack::start_secured`]) and the link authenticated by the nkey
    /// whose seed is `link_seed` (`sluice nats-config --auth`).
    pub async fn start_secured(
        sluice: impl Into<PathBuf>,
        config_toml: &str,
        workers: usize,
        link_seed: &str,
    ) -> TwoRegions {
        let pair = nkeys::KeyPair::from_seed(link_seed).expect("an nkey user seed");
        let key = LinkKey {
            public: pair.public_key(),
            seed: LinkSeed::Literal(link_seed.to_string()),
        };
        TwoRegions::start_as(sluice.into(), config_toml, workers, Some(key)).await
    }

    async fn start_as(
        sluice: PathBuf,
        config_toml: &str,
        workers: usize,
        key: Option<LinkKey>,
    ) -> TwoRegions {
        let link_port = free_ports(1).expect("a free port for the link")[0];
        let link = LinkProxy::start(([127, 0, 0, 1], link_port).into()).expect("the link proxy");
        let proxy = link.addr().to_string();
        let east_links = |nats: &mut NatsServerConfig| {
            nats.server_name = format!("{EAST}-1");
            nats.region = Some(RegionLinks {
                region: RegionName::new(EAST).expect("a region name"),
                listen: Some(format!("127.0.0.1:{link_port}")),
                advertise: Some(proxy.clone()),
                connect: Vec::new(),
                key: key.clone(),
            })
        };
        let west_links = |nats: &mut NatsServerConfig| west_links(nats, &proxy, key.clone());
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

/// west's link: to east through the proxy at `proxy`.
fn west_links(nats: &mut NatsServerConfig, proxy: &str, key: Option<LinkKey>) {
    nats.server_name = format!("{WEST}-1");
    nats.region = Some(RegionLinks {
        region: RegionName::new(WEST).expect("a region name"),
        listen: None,
        advertise: None,
        connect: vec![(
            RegionName::new(EAST).expect("a region name"),
            format!("nats-leaf://{proxy}"),
        )],
        key,
    });
}
