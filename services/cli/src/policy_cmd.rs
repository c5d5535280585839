//! `sluice policy list|get|set|rm|apply|export` (SPEC §7): the live policies in
//! the `sluice-policies` bucket. Every value is checked as a config file's
//! policy is, with the same messages, before anything is written
//! ([`sluice_client::policy_store`], which the gateway writes with too);
//! workers put a change in force within a second
//! ([`sluice_worker::policy_watch`]).

use crate::common::Common;
use anyhow::{anyhow, bail, Context as _, Result};
use async_nats::jetstream::{self, kv};
use futures::StreamExt;
use sluice_client::{policy_store, KeyPath};
use sluice_core::config::{Config, LimitTable, PolicyTable};
use sluice_core::policies::{self, export, OverrideTable, Policies};
use sluice_core::policy::Algorithm;
use sluice_core::region::RegionName;
use sluice_core::storage::{PolicyKey, POLICY_BUCKET};
use sluice_worker::fleet;
use sluice_worker::service::PolicyInForce;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct PolicyArgs {
    #[command(subcommand)]
    pub command: PolicyCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum PolicyCommand {
    /// The policies in force: the config file's, overlaid by the bucket's.
    List,
    /// One policy in force, as the JSON the bucket holds.
    Get { policy: String },
    /// Set a policy in the bucket (in force everywhere within a second).
    Set {
        policy: String,
        /// fixed_window | sliding_log | sliding_window | token_bucket | gcra
        #[arg(long)]
        algorithm: String,
        /// A limit, MAX/PER (e.g. 10/1m, or 100000/month: PER may be a
        /// calendar period, day, week or month, under fixed_window), or
        /// MAX/PER:BURST for token_bucket and gcra; repeat for limits that
        /// must all hold.
        #[arg(long = "limit", required = true)]
        limits: Vec<String>,
        /// Let clients decide a hot key's asks from slices of its budget
        /// (fixed_window, token_bucket, gcra; docs/CLIENT.md).
        #[arg(long)]
        local_budget: bool,
        #[command(flatten)]
        extra: Box<PolicyFlags>,
    },
    /// Remove a policy from the bucket (the config file's, if any, is back
    /// in force; `default` cannot be removed).
    Rm { policy: String },
    /// Set every `[policies.X]` of a TOML config file in the bucket, and
    /// every override of its `[overrides.<policy>]` tables (what `export`
    /// prints).
    Apply { file: PathBuf },
    /// Print the bucket's live policies and overrides as TOML that `apply`
    /// takes back (a backup, or a copy for another deployment).
    Export,
    /// Replace one key's limits under a policy (`--limit 0/1m` blocks it).
    Override {
        policy: String,
        #[arg(help = crate::common::KEY_HELP)]
        key: String,
        #[command(flatten)]
        form: crate::common::KeyForm,
        /// A limit, MAX/PER (or MAX/PER:BURST); repeat for several.
        #[arg(long = "limit", required = true)]
        limits: Vec<String>,
    },
    /// Remove a key's override: the policy's limits apply again.
    Unoverride {
        policy: String,
        #[arg(help = crate::common::KEY_HELP)]
        key: String,
        #[command(flatten)]
        form: crate::common::KeyForm,
    },
}

/// The flags of `sluice policy set` beyond the algorithm and limits, each
/// a field of the policy table (SPEC §14); checked with the table.
#[derive(clap::Args, Debug, Default)]
pub struct PolicyFlags {
    /// enforce (the default) | shadow: decide and count, but answer every
    /// ask allowed, flagging those enforcement would deny (shadow_denied)
    #[arg(long)]
    mode: Option<String>,
    /// The time zone of calendar periods (an IANA name, default UTC)
    #[arg(long)]
    tz: Option<String>,
    /// The first day of a calendar week (default monday)
    #[arg(long)]
    week_start: Option<String>,
    /// The day calendar months start on, 1 to 31 (default 1; a shorter
    /// month starts on its last day)
    #[arg(long)]
    anchor_day: Option<u64>,
    /// region (the default: each region counts its own asks) | global (one
    /// limit across regions; give --home and --regions)
    #[arg(long)]
    scope: Option<String>,
    /// The region that keeps a global policy's count
    #[arg(long)]
    home: Option<String>,
    /// The regions a global policy holds across, comma-separated (east,west)
    #[arg(long, value_delimiter = ',')]
    regions: Vec<String>,
    /// A region's weight in its reserved share, REGION=WEIGHT (default 1
    /// each); repeat for several
    #[arg(long = "region-share")]
    region_shares: Vec<String>,
    /// What a region cut off from the home does: reserved (the default) |
    /// closed | open
    #[arg(long)]
    on_cut: Option<String>,
    /// An alert threshold in percent of each limit's max, 1 to 1000
    /// (fixed_window); repeat for several: the first time a key's count in
    /// a window reaches it, one alert goes out (sluice alerts)
    #[arg(long = "alert", allow_negative_numbers = true)]
    alerts: Vec<i64>,
}

impl PolicyFlags {
    /// `table` with these flags' fields.
    fn fill(&self, mut table: PolicyTable) -> Result<PolicyTable> {
        if let Some(mode) = &self.mode {
            table.mode = mode.parse().map_err(|e| anyhow!("--mode: {e}"))?;
        }
        table.tz = self.tz.clone();
        table.week_start = self.week_start.clone();
        table.anchor_day = self.anchor_day;
        table.scope = self.scope.clone();
        table.home = self.home.clone();
        table.regions = (!self.regions.is_empty()).then(|| self.regions.clone());
        table.on_cut = self.on_cut.clone();
        if !self.region_shares.is_empty() {
            let shares = self
                .region_shares
                .iter()
                .map(|share| {
                    let (region, weight) = share
                        .split_once('=')
                        .and_then(|(r, w)| Some((r.to_string(), w.parse::<i64>().ok()?)))
                        .ok_or_else(|| {
                            anyhow!("--region-share {share:?}: write REGION=WEIGHT, e.g. east=2")
                        })?;
                    Ok((region, weight))
                })
                .collect::<Result<_>>()?;
            table.region_shares = Some(shares);
        }
        table.alerts = self.alerts.clone();
        Ok(table)
    }
}

pub fn run(common: &Common, args: &PolicyArgs) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        match &args.command {
            PolicyCommand::List => {
                for p in on_workers(common).await? {
                    println!("{:<20} {:<6} {}", p.name, p.from, json(&p.policy)?);
                }
                Ok(())
            }
            PolicyCommand::Get { policy } => {
                let p = on_workers(common)
                    .await?
                    .into_iter()
                    .find(|p| &p.name == policy)
                    .ok_or_else(|| {
                        anyhow!("no policy named {policy:?} is in force on the workers")
                    })?;
                println!("{}", json(&p.policy)?);
                eprintln!("(from the {})", p.from);
                Ok(())
            }
            PolicyCommand::Set {
                policy,
                algorithm,
                limits,
                local_budget,
                extra,
            } => {
                let table = extra.fill(PolicyTable {
                    local_budget: *local_budget,
                    ..PolicyTable::new(
                        algorithm.parse::<Algorithm>().map_err(|e| anyhow!("{e}"))?,
                        limits.iter().map(|l| limit(l)).collect::<Result<_>>()?,
                    )
                })?;
                let region = common.load_config()?.region;
                put(&bucket(common).await?, policy, &table, region.as_ref()).await
            }
            PolicyCommand::Rm { policy } => {
                policy_store::remove_policy(&bucket(common).await?, policy)
                    .await
                    .map_err(|e| anyhow!(e))?;
                println!("policy {policy} removed from {POLICY_BUCKET}");
                Ok(())
            }
            PolicyCommand::Override {
                policy,
                key,
                form,
                limits,
            } => {
                let key = form.key(key)?;
                let table = OverrideTable {
                    limits: limits.iter().map(|l| limit(l)).collect::<Result<_>>()?,
                };
                let in_force = in_force(common).await?;
                let bucket = bucket(common).await?;
                put_override(&bucket, &in_force, policy, &key, &table).await
            }
            PolicyCommand::Unoverride { policy, key, form } => {
                let key = form.key(key)?;
                policy_store::remove_override(&bucket(common).await?, policy, &key)
                    .await
                    .map_err(|e| anyhow!(e))?;
                println!(
                    "override {} removed",
                    policy_store::override_entry(policy, &key)?
                );
                Ok(())
            }
            PolicyCommand::Apply { file } => apply(common, file).await,
            PolicyCommand::Export => {
                let region = common.load_config()?.region;
                print!("{}", export(&bucket(common).await?, region.as_ref()).await?);
                Ok(())
            }
        }
    })
}

/// `sluice policy apply FILE`: the file's `[policies.X]` tables, checked as
/// a config file's, then its overrides (docs/CONFIG.md, "Export and
/// apply").
async fn apply(common: &Common, file: &Path) -> Result<()> {
    let name = file.display().to_string();
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("cannot read the policy file {name}"))?;
    let to_apply = export::read(&text).map_err(|e| anyhow!("{name}: {e}"))?;
    let config = Config::from_toml(&to_apply.config_text, &name)?;
    let bucket = bucket(common).await?;
    for policy in &to_apply.policies {
        let p = config
            .policy(policy)
            .ok_or_else(|| anyhow!("{name}: no policy {policy:?} after checking the file"))?;
        put(&bucket, policy, &PolicyTable::of(p), config.region.as_ref()).await?;
    }
    if to_apply.overrides.is_empty() {
        return Ok(());
    }
    let in_force = in_force(common).await?;
    for (policy, token, table) in &to_apply.overrides {
        // The token as written, grouped (`bigcorp.ceo`) or not.
        let key = KeyPath::from_token(token).map_err(|e| anyhow!("{name}: key {token:?}: {e}"))?;
        put_override(&bucket, &in_force, policy, &key, table).await?;
    }
    Ok(())
}

/// The bucket's live policies and overrides as the TOML `apply` takes
/// back ([`export::Export`]); each policy is checked against `region` as
/// a worker would, and one refused is left out with a warning.
async fn export(bucket: &kv::Store, region: Option<&RegionName>) -> Result<String> {
    let mut out = export::Export {
        region: region.map(|r| r.to_string()),
        ..Default::default()
    };
    for (key, value) in entries(bucket).await? {
        match PolicyKey::parse(&key) {
            Some(PolicyKey::Policy(name)) => match policies::parse(&name, &value, region) {
                Ok(p) => {
                    out.policies.insert(name, PolicyTable::of(&p));
                }
                Err(e) => eprintln!("refused, not exported: {e}"),
            },
            Some(PolicyKey::Override { policy, key_token }) => {
                match policies::parse_override(&policy, &value) {
                    Ok(table) => {
                        out.overrides
                            .entry(policy)
                            .or_default()
                            .insert(key_token, table);
                    }
                    Err(e) => eprintln!("refused, not exported: {e}"),
                }
            }
            None => eprintln!("not exported: {key:?} is no policy or override key"),
        }
    }
    out.render().map_err(|e| anyhow!(e))
}

/// Checks `table` as an override of `policy` in force (`in_force`), then
/// writes it for `key` ([`policy_store::put_override`]).
async fn put_override(
    bucket: &kv::Store,
    in_force: &Policies,
    policy: &str,
    key: &KeyPath,
    table: &OverrideTable,
) -> Result<()> {
    let base = in_force
        .get(policy)
        .ok_or_else(|| anyhow!("no policy named {policy:?} is in force"))?;
    let revision = policy_store::put_override(bucket, base, key, table)
        .await
        .map_err(|e| anyhow!(e))?;
    let entry = policy_store::override_entry(policy, key)?;
    println!(
        "override {entry} set (revision {revision}): {}",
        serde_json::to_string(table)?
    );
    Ok(())
}

/// `MAX/PER` or `MAX/PER:BURST`.
fn limit(text: &str) -> Result<LimitTable> {
    let usage = || anyhow!("--limit {text:?}: write MAX/PER (e.g. 10/1m) or MAX/PER:BURST");
    let (max, rest) = text.split_once('/').ok_or_else(usage)?;
    let (per, burst) = match rest.split_once(':') {
        Some((per, burst)) => (per, Some(burst.parse().map_err(|_| usage())?)),
        None => (rest, None),
    };
    Ok(LimitTable {
        max: max.parse().map_err(|_| usage())?,
        per: per.to_string(),
        burst,
    })
}

fn json(table: &PolicyTable) -> Result<String> {
    Ok(serde_json::to_string(table)?)
}

/// Checks `table` as a config file's policy (in the config's region),
/// then writes it.
async fn put(
    bucket: &kv::Store,
    name: &str,
    table: &PolicyTable,
    region: Option<&RegionName>,
) -> Result<()> {
    let revision = policy_store::put_policy(bucket, name, table, region)
        .await
        .map_err(|e| anyhow!(e))?;
    println!("policy {name} set (revision {revision}): {}", json(table)?);
    Ok(())
}

async fn bucket(common: &Common) -> Result<kv::Store> {
    let client = common.connect("sluice policy").await?;
    policy_store::bucket(&client).await.map_err(|e| anyhow!(e))
}

/// How long `policy list` and `policy get` wait for every worker to have
/// applied the policy bucket as it stands when they ask.
const CAUGHT_UP_WITHIN: Duration = Duration::from_secs(2);

/// The policies in force on the workers (their status, over NATS), once
/// every worker has applied the policy bucket as it stands now, or after
/// [`CAUGHT_UP_WITHIN`] (then from the worker furthest along, with a
/// warning naming the others). The workers, not this command's config
/// file, know what is in force: `sluice dev` runs a config of its own.
async fn on_workers(common: &Common) -> Result<Vec<PolicyInForce>> {
    let partitions = common.load_config()?.partitions;
    let client = common.connect("sluice policy").await?;
    let bucket = jetstream::new(client.clone())
        .get_key_value(POLICY_BUCKET)
        .await
        .map_err(|e| {
            anyhow!("no {POLICY_BUCKET} bucket ({e}): start a worker first, it creates the buckets")
        })?;
    let target = bucket
        .status()
        .await
        .context("cannot read the policy bucket's revision")?
        .info
        .state
        .last_sequence;
    let deadline = Instant::now() + CAUGHT_UP_WITHIN;
    loop {
        let workers = fleet::collect(&client, partitions, Duration::from_millis(500))
            .await?
            .workers;
        let behind: Vec<&str> = workers
            .iter()
            .filter(|w| w.policy_revision < target)
            .map(|w| w.worker.as_str())
            .collect();
        if !workers.is_empty() && (behind.is_empty() || Instant::now() >= deadline) {
            if !behind.is_empty() {
                eprintln!(
                    "warning: workers {} have not applied the policy bucket's revision {target} yet; shown: the worker furthest along",
                    behind.join(", ")
                );
            }
            let ahead = workers
                .into_iter()
                .max_by_key(|w| w.policy_revision)
                .expect("not empty");
            return Ok(ahead.policies);
        }
        if Instant::now() >= deadline {
            bail!("no worker answered: the policies in force are the workers'; start one (`sluice worker`) or check --nats-url");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The config file's policies overlaid by the bucket's valid ones.
async fn in_force(common: &Common) -> Result<Policies> {
    let mut policies = Policies::from_config(&common.load_config()?);
    for (key, value) in entries(&bucket(common).await?).await? {
        if !matches!(PolicyKey::parse(&key), Some(PolicyKey::Policy(_))) {
            continue;
        }
        if let Err(e) = policies.apply(&key, Some(&value)) {
            eprintln!("refused (not in force): {e}");
        }
    }
    if policies.iter().next().is_none() {
        bail!("no policy in force");
    }
    Ok(policies)
}

/// Every key of the policy bucket that holds a value, with it.
async fn entries(bucket: &kv::Store) -> Result<Vec<(String, bytes::Bytes)>> {
    let mut keys = bucket
        .keys()
        .await
        .context("cannot list the policy bucket")?;
    let mut found = Vec::new();
    while let Some(key) = keys.next().await {
        let key = key?;
        if let Some(value) = bucket.get(&key).await? {
            found.push((key, value));
        }
    }
    Ok(found)
}
