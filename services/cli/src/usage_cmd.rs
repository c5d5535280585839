//! `sluice usage KEY` and `sluice usage --top N [--group ORG]` (SPEC §9,
//! §17): one
//! `rl.usage.<key>` or `rl.top` request, its reply as a table and a chart
//! drawn in the terminal (textplots), or as JSON.

use crate::common::Common;
use crate::key_cmd::request_once;
use anyhow::{anyhow, Result};
use sluice_client::queries::{self, QUERY_TIMEOUT};
use sluice_core::config::{format_duration, parse_duration};
use sluice_core::time::utc_minute;
use sluice_core::usage::By;
use sluice_core::wire::usage::{Point, TopQuery, TopReply, UsageQuery, UsageReply};
use textplots::{Chart, Plot, Shape};

#[derive(clap::Args, Debug)]
pub struct UsageArgs {
    /// The key (any text; it is percent-encoded for you), org/key or
    /// org/team/key for a grouped key's own usage (--one-key: a '/' is
    /// part of the key). Leave it out with --top.
    #[arg(required_unless_present = "top", conflicts_with = "top")]
    pub key: Option<String>,
    #[command(flatten)]
    pub form: crate::common::KeyForm,
    /// Show the N keys that used the most (or were denied the most: --by denied).
    #[arg(long, value_name = "N")]
    pub top: Option<u64>,
    /// What --top ranks by: used or denied.
    #[arg(long, default_value = "used", value_parser = ["used", "denied"])]
    pub by: String,
    /// Only this policy (a key's usage: default `default`; --top: every policy).
    #[arg(long)]
    pub policy: Option<String>,
    /// With --top: only the members of this group, named by the first token
    /// of its keys (acme ranks acme/alice and acme/eng/alice, not acme
    /// itself; --one-key: a '/' is part of it).
    #[arg(long, value_name = "ORG", requires = "top")]
    pub group: Option<String>,
    /// How far back: a duration such as 30m, 24h, 7d.
    #[arg(long, default_value = "1h")]
    pub since: String,
    /// The step of the points: 1m, 5m, 1h or 1d (default: the finest tier
    /// that still holds the start of the range).
    #[arg(long)]
    pub step: Option<String>,
    /// Print the reply as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(common: &Common, args: &UsageArgs) -> Result<()> {
    let since =
        parse_duration(&args.since).map_err(|e| anyhow!("--since {:?}: {e}", args.since))?;
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as u64;
    let from_ms = now_ms.saturating_sub(since.as_millis() as u64);
    if let Some(n) = args.top {
        let by = if args.by == "denied" {
            By::Denied
        } else {
            By::Used
        };
        let group = args.group.as_deref().map(|g| group_token(args.form, g));
        let query = TopQuery {
            from_ms: Some(from_ms),
            n: Some(n),
            by: Some(by),
            policy: args.policy.clone(),
            group: group.transpose()?,
            ..Default::default()
        };
        let reply: TopReply = request_once(common, "usage --top", |nats| async move {
            queries::top(&nats, &query, QUERY_TIMEOUT).await
        })?;
        if args.json {
            println!("{}", serde_json::to_string(&reply)?);
        } else {
            print_top(&reply, &args.since, args.group.as_deref());
        }
        return Ok(());
    }
    let key = args
        .key
        .as_deref()
        .expect("clap requires a key without --top");
    let query = UsageQuery {
        policy: args.policy.clone(),
        from_ms: Some(from_ms),
        to_ms: None,
        step: args.step.clone(),
    };
    let path = args.form.key(key)?;
    let reply: UsageReply = request_once(common, "usage", |nats| async move {
        queries::usage(&nats, &path, &query, QUERY_TIMEOUT).await
    })?;
    if args.json {
        println!("{}", serde_json::to_string(&reply)?);
    } else {
        print_series(key, &reply, &args.since);
    }
    Ok(())
}

/// The token of the group `text` names: one token of a key path.
fn group_token(form: crate::common::KeyForm, text: &str) -> Result<String> {
    let path = form
        .key(text)
        .map_err(|e| anyhow!("--group {text:?}: {e}"))?;
    if path.is_grouped() {
        return Err(anyhow!(
            "--group {text:?}: a group is named by the first token of its keys alone (acme for acme/eng/alice); a '/' inside it: give --one-key"
        ));
    }
    Ok(path.token().to_string())
}

fn print_top(reply: &TopReply, since: &str, group: Option<&str>) {
    let by = match reply.by {
        By::Used => "used",
        By::Denied => "denied",
    };
    let of = group.map_or(String::new(), |g| format!(" members of {g}"));
    println!(
        "top {}{of} by {by}, last {since} ({} to {} UTC)",
        reply.keys.len(),
        utc_minute(reply.from_ms),
        utc_minute(reply.to_ms)
    );
    let width = reply
        .keys
        .iter()
        .map(|k| k.shown_key().chars().count())
        .max()
        .unwrap_or(3)
        .max(3);
    println!(
        "{:>4}  {:<width$}  {:<12} {:>12} {:>12}",
        "#", "key", "policy", "used", "denied"
    );
    for (i, k) in reply.keys.iter().enumerate() {
        println!(
            "{:>4}  {:<width$}  {:<12} {:>12} {:>12}",
            i + 1,
            k.shown_key(),
            k.policy,
            k.used,
            k.denied
        );
    }
    if reply.keys.is_empty() {
        println!("(nothing counted in the range)");
    }
}

fn print_series(key: &str, reply: &UsageReply, since: &str) {
    let steps: Vec<String> = reply
        .parts
        .iter()
        .map(|p| format_duration(std::time::Duration::from_millis(p.step_ms)))
        .collect();
    println!(
        "usage of {key} under {}, last {since} in steps of {} (complete to {} UTC)",
        reply.policy,
        steps.join(" then "),
        utc_minute(reply.complete_to_ms)
    );
    println!("{:<17} {:>12} {:>12}", "from (UTC)", "used", "denied");
    let mut quiet = 0;
    let (mut used, mut denied) = (0u64, 0u64);
    for p in &reply.points {
        used += p.used;
        denied += p.denied;
        if p.used == 0 && p.denied == 0 {
            quiet += 1;
            continue;
        }
        println!("{:<17} {:>12} {:>12}", utc_minute(p.t_ms), p.used, p.denied);
    }
    println!("{:<17} {:>12} {:>12}", "total", used, denied);
    if quiet > 0 {
        println!("({quiet} steps with nothing counted are not listed)");
    }
    if reply.points.len() >= 2 {
        chart(&reply.points, reply.complete_to_ms);
    }
}

/// Used (and denied, when any) per step, minutes before now on the x axis.
fn chart(points: &[Point], now_ms: u64) {
    let minutes_ago = |t: u64| -((now_ms.saturating_sub(t)) as f32 / 60_000.0);
    let used: Vec<(f32, f32)> = points
        .iter()
        .map(|p| (minutes_ago(p.t_ms), p.used as f32))
        .collect();
    let denied: Vec<(f32, f32)> = points
        .iter()
        .map(|p| (minutes_ago(p.t_ms), p.denied as f32))
        .collect();
    let (xmin, xmax) = (used[0].0, used[used.len() - 1].0);
    println!(
        "\nused per step (x: minutes ago){}",
        if points.iter().any(|p| p.denied > 0) {
            ", then denied"
        } else {
            ""
        }
    );
    let mut chart = Chart::new(120, 40, xmin, xmax.max(xmin + 1.0));
    chart.lineplot(&Shape::Steps(&used)).display();
    if points.iter().any(|p| p.denied > 0) {
        let mut chart = Chart::new(120, 40, xmin, xmax.max(xmin + 1.0));
        chart.lineplot(&Shape::Steps(&denied)).display();
    }
}
