//! A worker's region (SPEC §12): the checks that it runs in the region
//! its config names, its answers to region hellos, and its view of which
//! other regions the link reaches (`sluice status`).
//!
//! Regional limits need no code of their own: each region is its own NATS
//! system and JetStream domain, and the link between regions carries only
//! `sluice-link.>` (`sluice_core::nats_config::link`), so no ask, lease or
//! queue group of one region ever reaches another. What can go wrong is
//! the configuration, and a worker refuses to start on it rather than
//! count in the wrong place:
//!
//! - its NATS server's JetStream domain is not its region (a config of
//!   another region, or none: `sluice nats-config --region` sets it);
//! - a worker of another region answers a hello on a regional subject:
//!   the link carries more than link subjects, so asks and queue groups
//!   would cross between regions.
//!
//! Replies across the link come back to a link inbox, so requests to other
//! regions go through a second connection whose inbox prefix is
//! `sluice-link.<region>.inbox`.

use crate::scatter::scatter;
use anyhow::{anyhow, bail, Context as _, Result};
use async_nats::jetstream;
use bytes::Bytes;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use sluice_core::region::{Hello, RegionName};
use sluice_core::subject::{
    is_link_reply_subject, link_hello, link_hello_all, link_inbox_prefix, REGION_HELLO,
};
use sluice_core::time::Clock;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a hello waits for answers: every worker that hears it answers
/// within a round trip, and there is no count to wait for.
const HELLO_WAIT: Duration = Duration::from_millis(400);

/// How often a worker asks which regions the link reaches.
const LOOK_EVERY: Duration = Duration::from_secs(2);

/// Another region, as this worker last saw it over the link.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkStatus {
    pub region: String,
    /// Its workers answered the latest hello.
    pub up: bool,
    /// When they last did (Unix ms; 0: never).
    pub last_seen_ms: u64,
}

/// The regions this worker has seen over the link.
#[derive(Default)]
pub struct RegionView {
    seen: Mutex<BTreeMap<String, LinkStatus>>,
}

impl RegionView {
    pub fn links(&self) -> Vec<LinkStatus> {
        self.seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// One round of hellos: who answered is up, everyone else seen before
    /// is down.
    fn record(&self, answered: &[Hello], own: &RegionName, now_ms: u64) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        for link in seen.values_mut() {
            link.up = false;
        }
        for hello in answered.iter().filter(|h| h.region != own.as_str()) {
            seen.insert(
                hello.region.clone(),
                LinkStatus {
                    region: hello.region.clone(),
                    up: true,
                    last_seen_ms: now_ms,
                },
            );
        }
    }
}

/// A running worker's region: its link connection and what it sees.
pub struct Region {
    pub name: RegionName,
    pub view: Arc<RegionView>,
    /// The link connection (its inbox is a link inbox): global limits'
    /// requests to other regions go out on it ([`crate::global`]).
    pub link: async_nats::Client,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Region {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Checks that this worker runs where its config says, then answers
/// hellos and watches the link. `connect` opens the link connection (the
/// worker's credentials, a link inbox prefix).
pub async fn start<F, Fut>(
    name: RegionName,
    worker_id: &str,
    client: &async_nats::Client,
    js: &jetstream::Context,
    clock: Arc<dyn Clock>,
    connect: F,
) -> Result<Region>
where
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = Result<async_nats::Client>>,
{
    check_domain(&name, js).await?;
    let hello = Hello {
        region: name.to_string(),
        worker: worker_id.to_string(),
    };
    let link = connect(link_inbox_prefix(name.as_str()))
        .await
        .context("cannot open the link connection")?;
    let regional = client.subscribe(REGION_HELLO).await?;
    let to_all = link.subscribe(link_hello_all()).await?;
    let to_region = link.subscribe(link_hello(name.as_str())).await?;
    client.flush().await?;
    link.flush().await?;
    let mut tasks = vec![
        tokio::spawn(answer(client.clone(), regional, hello.clone(), false)),
        tokio::spawn(answer(link.clone(), to_all, hello.clone(), true)),
        tokio::spawn(answer(link.clone(), to_region, hello, true)),
    ];
    check_no_leak(&name, client).await?;
    let view = Arc::new(RegionView::default());
    tasks.push(tokio::spawn(watch_links(
        link.clone(),
        client.clone(),
        clock,
        name.clone(),
        view.clone(),
    )));
    tracing::info!(region = %name, "region checked: JetStream domain and link subjects");
    Ok(Region {
        name,
        view,
        link,
        tasks,
    })
}

/// The server's JetStream domain must be the region's name (`sluice
/// nats-config --region` sets it), or this worker would keep its leases
/// and counts in another region's JetStream, or one shared by all.
async fn check_domain(name: &RegionName, js: &jetstream::Context) -> Result<()> {
    let account = crate::store::while_not_ready("JetStream's account info", || async {
        js.query_account().await.map_err(anyhow::Error::from)
    })
    .await?;
    match account.domain.as_deref() {
        Some(domain) if domain == name.as_str() => Ok(()),
        Some(domain) => bail!(
            "this worker's region is \"{name}\" but its NATS server's JetStream domain is {domain:?}: \
             it is connected to another region's server, or the server's config is another region's; \
             print the right one with `sluice nats-config --region {name}`"
        ),
        None => bail!(
            "this worker's region is \"{name}\" but its NATS server has no JetStream domain: \
             a region's servers run with `jetstream {{ domain: \"{name}\" }}`; \
             print their config with `sluice nats-config --region {name}`"
        ),
    }
}

/// A hello on a regional subject must be answered from this region only.
async fn check_no_leak(name: &RegionName, client: &async_nats::Client) -> Result<()> {
    let answers = gather(client, REGION_HELLO.to_string(), false).await?;
    if let Some(other) = answers.iter().find(|h| h.region != name.as_str()) {
        bail!(
            "worker {} of region {:?} answered a hello of region \"{name}\" on {REGION_HELLO}: \
             the link between the regions carries regional subjects, so asks, counts and queue groups \
             would cross; links must carry only sluice-link.> (use the link config of \
             `sluice nats-config --link`, docs/REGIONS.md)",
            other.worker,
            other.region
        );
    }
    Ok(())
}

/// Asks the link every [`LOOK_EVERY`] which regions answer, and checks
/// again that no other region answers on a regional subject (a link
/// reconfigured since this worker started): that is logged as an error
/// every round it lasts, since asks and queue groups cross meanwhile.
async fn watch_links(
    link: async_nats::Client,
    client: async_nats::Client,
    clock: Arc<dyn Clock>,
    name: RegionName,
    view: Arc<RegionView>,
) {
    let mut tick = tokio::time::interval(LOOK_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match gather(&link, link_hello_all(), true).await {
            Ok(answers) => view.record(&answers, &name, clock.now().0 / 1_000_000),
            Err(e) => tracing::debug!("region hello failed: {e:#}"),
        }
        if let Err(e) = check_no_leak(&name, &client).await {
            tracing::error!("{e:#}");
        }
    }
}

/// Publishes a hello on `subject` and collects the answers for
/// [`HELLO_WAIT`].
async fn gather(client: &async_nats::Client, subject: String, link: bool) -> Result<Vec<Hello>> {
    if link {
        let inbox = client.new_inbox();
        if !is_link_reply_subject(&inbox) {
            return Err(anyhow!(
                "the link connection's inbox {inbox:?} is not a link inbox"
            ));
        }
    }
    let replies = scatter(client, subject, Bytes::new(), HELLO_WAIT).await?;
    Ok(replies
        .filter_map(|msg| async move { serde_json::from_slice::<Hello>(&msg.payload).ok() })
        .collect()
        .await)
}

/// Answers every hello `asked` brings with `hello`. Across the link, only
/// to link inboxes: the only replies the link carries.
async fn answer(
    client: async_nats::Client,
    mut asked: async_nats::Subscriber,
    hello: Hello,
    link: bool,
) {
    let body: bytes::Bytes = serde_json::to_vec(&hello).unwrap_or_default().into();
    while let Some(msg) = asked.next().await {
        let Some(reply) = msg.reply else { continue };
        let allowed = if link {
            is_link_reply_subject(&reply)
        } else {
            sluice_core::subject::is_safe_reply_subject(&reply)
        };
        if allowed {
            let _ = client.publish(reply, body.clone()).await;
        }
    }
}
