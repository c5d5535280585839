//! Who may do what (SPEC §10): the three roles `client`, `worker` and
//! `admin` as nats-server users with publish/subscribe allow lists, so the
//! NATS server itself refuses what a role may not do and no sluice process
//! has to be trusted to behave. `sluice nats-config --auth` renders them
//! into the server config ([`render`]); docs/SECURITY.md explains each
//! line.
//!
//! The lists are allow lists: anything not named is refused. They name
//! sluice's subjects through [`crate::subject`] and its JetStream streams
//! through [`crate::storage`], so a renamed bucket cannot leave a stale
//! permission behind. What each role needs:
//!
//! - `client`: ask (`rl.allow.>`, `rl.hit.>`, `rl.usage.>`, the holds'
//!   `rl.reserve.>`, `rl.settle.>`, `rl.extend.>`, `rl.top`, their
//!   mapped forms `rl.p.*.allow.>`, ..., which is what the server checks,
//!   see [`ask_subjects`], and the batching client's `rl.p.*.batch` /
//!   `rl.w.*.batch`, which carry the same asks), receive replies (`_INBOX.>`), the fixed probe keys'
//!   arrival subjects (the client's start-up check of the partition count),
//!   and read the policy bucket (`ClientOptions::follow_policies`, on in the
//!   gateway): stream info and an ordered consumer on `KV_sluice-policies`,
//!   and follow threshold alerts (`rl.alert.>` and reads of
//!   `SLUICE_ALERTS`), nothing else under `$JS`. No `rl.p.*.inspect.>` / `rl.p.*.reset.>`,
//!   no subscription to any
//!   partition or worker subject (that would answer in a worker's place),
//!   no writes to any bucket or stream.
//! - `worker`: everything on `rl.>` (subscribe: partitions, worker batches,
//!   the unmapped-key catch-alls; publish: the start-up probes), the micro
//!   service's `$SRV.>` and `sluice.status.>`, its buckets and journal
//!   (`$KV.sluice-leases.>`, `$KV.sluice-snapshots.>`, `sluice.journal.>`,
//!   the alerts' `rl.alert.>` and `SLUICE_ALERTS`
//!   and the `$JS.API` requests on those streams and on the policy bucket,
//!   which it creates but never writes), and replies through
//!   `allow_responses` (to any requester's inbox, whatever its prefix).
//! - `admin`: what a client may, plus `rl.inspect.>`, `rl.reset.>`, the
//!   policy bucket read and write, the lease and snapshot buckets and the
//!   alerts stream read
//!   (`sluice status`), and the workers' status service (`$SRV`).
//!
//! Reply subjects are the one thing permissions cannot check: a client
//! chooses the reply subject of its request, and the worker publishes the
//! reply with the worker's permissions. So workers refuse to reply into
//! sluice's or the system's subjects
//! ([`crate::subject::is_safe_reply_subject`]). `allow_responses` is given
//! to workers only: a role that may both publish and subscribe on a subject
//! could otherwise send itself a message whose reply subject is anything,
//! and so gain a publish permission.
//!
//! The users sit in the server's top-level `authorization` block, so they
//! belong to the default account `$G`, which is where the partition mapping
//! and JetStream are: mappings and JetStream work unchanged for every user.

use super::link::RegionLinks;
use super::quote::quote;
use crate::storage::{
    bucket_stream, usage_stream, usage_subjects, ALERT_STREAM, JOURNAL_STREAM, JOURNAL_SUBJECTS,
    LEASE_BUCKET, POLICY_BUCKET, SNAPSHOT_BUCKET,
};
use crate::subject::{
    alert_filter, probe, Verb, LINK_ROOT, PARTITION_PREFIX, ROOT, STATUS_GROUP, STATUS_SERVICE,
    TOP, TOP_SCATTER, WORKER_PREFIX,
};
use std::fmt;

/// A role of SPEC §10; its user in the generated config has the same name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// Asks, hits, usage: API servers, the gateway, `sluice check`, `sluice bench`.
    Client,
    /// `sluice worker`.
    Worker,
    /// A client that may also inspect, reset, edit policies and read status.
    Admin,
}

impl Role {
    /// Every role, in the order they are rendered.
    pub const ALL: [Role; 3] = [Role::Client, Role::Worker, Role::Admin];

    /// The user name: `client`, `worker`, `admin`.
    pub const fn name(self) -> &'static str {
        match self {
            Role::Client => "client",
            Role::Worker => "worker",
            Role::Admin => "admin",
        }
    }

    /// The environment variable that sets the role's password for `sluice
    /// nats-config --auth`: `SLUICE_AUTH_CLIENT_PASSWORD`, ...
    pub fn password_env(self) -> String {
        format!("SLUICE_AUTH_{}_PASSWORD", self.name().to_ascii_uppercase())
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A role's user in the config.
#[derive(Clone, PartialEq, Eq)]
pub struct RoleUser {
    pub role: Role,
    pub password: Password,
}

impl RoleUser {
    /// One user per role, in [`Role::ALL`]'s order, each with `password(role)`.
    pub fn every(mut password: impl FnMut(Role) -> Password) -> Vec<RoleUser> {
        Role::ALL
            .into_iter()
            .map(|role| RoleUser {
                role,
                password: password(role),
            })
            .collect()
    }
}

/// Where nats-server gets a role's password from.
#[derive(Clone, PartialEq, Eq)]
pub enum Password {
    /// Written into the config, in the clear (nats-server also accepts
    /// bcrypt hashes, `$2a$...`, written here as they are).
    Literal(String),
    /// A reference to the role's variable ([`Role::password_env`]:
    /// `password: $SLUICE_AUTH_CLIENT_PASSWORD`), which nats-server
    /// resolves from its own environment when it loads the file; so the
    /// file holds no secret and can be checked in (compose.yaml does).
    /// nats-server parses the variable's value as a config value: a
    /// password of digits only, or `true`, is not a string to it. Use
    /// letters and digits starting with a letter (or put the value in
    /// double quotes inside the variable). An unset variable stops the
    /// server at start with "variable reference ... can not be found".
    FromEnv,
}

impl From<String> for Password {
    fn from(password: String) -> Password {
        Password::Literal(password)
    }
}

/// The password is never shown.
impl fmt::Debug for RoleUser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RoleUser")
            .field("role", &self.role)
            .field("password", &"***")
            .finish()
    }
}

/// What one role may publish and subscribe to (NATS subject patterns).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Permissions {
    pub publish: Vec<String>,
    pub subscribe: Vec<String>,
    /// May publish to the reply subject of a message it received.
    pub allow_responses: bool,
}

/// The permissions of `role`, on a server whose workers keep usage in
/// tiers of `usage_steps` (`1m`, ...: their streams are named by them).
pub fn permissions(role: Role, usage_steps: &[String]) -> Permissions {
    match role {
        Role::Client => client(),
        Role::Worker => worker(usage_steps),
        Role::Admin => admin(),
    }
}

/// `$JS.API` requests and flow-control replies that read a stream: stream
/// info, message get (direct or not), and consumers (an ordered consumer,
/// as a KV watch or key listing makes, is created and deleted again).
fn js_read(stream: &str) -> Vec<String> {
    vec![
        format!("$JS.API.STREAM.INFO.{stream}"),
        format!("$JS.API.STREAM.MSG.GET.{stream}"),
        format!("$JS.API.DIRECT.GET.{stream}"),
        format!("$JS.API.DIRECT.GET.{stream}.>"),
        format!("$JS.API.CONSUMER.CREATE.{stream}"),
        format!("$JS.API.CONSUMER.CREATE.{stream}.>"),
        format!("$JS.API.CONSUMER.DELETE.{stream}.>"),
        format!("$JS.API.CONSUMER.INFO.{stream}.>"),
        format!("$JS.FC.{stream}.>"),
    ]
}

/// [`js_read`] with the pulls of a pull consumer: how the alerts stream
/// is read ([`ALERT_STREAM`], by `sluice alerts`, the clients and the
/// dashboard).
fn js_pull(stream: &str) -> Vec<String> {
    let mut read = js_read(stream);
    read.push(format!("$JS.API.CONSUMER.MSG.NEXT.{stream}.>"));
    read
}

/// Every `$JS.API` request on one stream (create, update, info, purge,
/// delete, messages, consumers, pulls) and its acks: for the worker, which
/// creates and keeps its streams.
fn js_own(stream: &str) -> Vec<String> {
    vec![
        format!("$JS.API.STREAM.*.{stream}"),
        format!("$JS.API.STREAM.MSG.*.{stream}"),
        format!("$JS.API.DIRECT.GET.{stream}"),
        format!("$JS.API.DIRECT.GET.{stream}.>"),
        format!("$JS.API.CONSUMER.*.{stream}"),
        format!("$JS.API.CONSUMER.*.{stream}.>"),
        format!("$JS.API.CONSUMER.*.*.{stream}.>"),
        format!("$JS.ACK.{stream}.>"),
        format!("$JS.FC.{stream}.>"),
    ]
}

/// The subjects a KV bucket's values are written to.
fn kv_write(bucket: &str) -> String {
    format!("$KV.{bucket}.>")
}

const INBOXES: &str = "_INBOX.>";

/// What publishing `verb`'s client subjects takes: the server checks a
/// publish permission against the subject *after* the mapping
/// (`rl.allow.bob` is checked as `rl.p.7.allow.bob`), so both the mapped
/// form and the unmapped one (a key of more than three tokens, which no mapping
/// matches and a worker answers with an error) must be allowed. Sending
/// to `rl.p.<n>.<verb>.<key>` directly gains nothing: a worker counts a
/// key only in the partition the key hashes to, whatever the subject said.
fn ask_subjects(verbs: &[Verb]) -> Vec<String> {
    verbs
        .iter()
        .flat_map(|v| [v.unmapped_wildcard(), v.any_partition_subject(">")])
        .collect()
}

fn client() -> Permissions {
    let mut publish = ask_subjects(&[
        Verb::Allow,
        Verb::Hit,
        Verb::Usage,
        Verb::Reserve,
        Verb::Settle,
        Verb::Extend,
    ]);
    publish.push(TOP.to_string());
    publish.push(format!("{PARTITION_PREFIX}.*.batch"));
    publish.push(format!("{WORKER_PREFIX}.*.batch"));
    let policies = bucket_stream(POLICY_BUCKET);
    publish.extend(
        js_read(&policies)
            .into_iter()
            .filter(|s| !s.contains(".MSG.GET.") && !s.contains(".DIRECT.GET.")),
    );
    // Threshold alerts (SPEC §14): followed live, or read from their stream.
    publish.extend(js_pull(ALERT_STREAM));
    let mut subscribe = vec![INBOXES.to_string(), alert_filter(None)];
    subscribe.extend(
        probe::client_keys()
            .iter()
            .map(|k| probe::arrival_subject(k)),
    );
    Permissions {
        publish,
        subscribe,
        allow_responses: false,
    }
}

fn worker(usage_steps: &[String]) -> Permissions {
    // The start-up probe of the mapping publishes `rl.allow.<probe>`.
    let mut publish = ask_subjects(&[Verb::Allow]);
    publish.extend([
        kv_write(LEASE_BUCKET),
        kv_write(SNAPSHOT_BUCKET),
        JOURNAL_SUBJECTS.to_string(),
        "$JS.API.INFO".to_string(),
        // A top query's share of every worker (SPEC §9).
        TOP_SCATTER.to_string(),
    ]);
    for bucket in [LEASE_BUCKET, SNAPSHOT_BUCKET, POLICY_BUCKET] {
        publish.extend(js_own(&bucket_stream(bucket)));
    }
    publish.extend(js_own(JOURNAL_STREAM));
    publish.push(alert_filter(None));
    publish.extend(js_own(ALERT_STREAM));
    for step in usage_steps {
        publish.push(usage_subjects(step));
        publish.extend(js_own(&usage_stream(step)));
    }
    // Link requests to other regions and answers to them (SPEC §12).
    publish.push(format!("{LINK_ROOT}.>"));
    Permissions {
        publish,
        subscribe: vec![
            format!("{ROOT}.>"),
            format!("{LINK_ROOT}.>"),
            INBOXES.to_string(),
            "$SRV.>".to_string(),
            format!("{STATUS_GROUP}.>"),
            TOP_SCATTER.to_string(),
        ],
        allow_responses: true,
    }
}

fn admin() -> Permissions {
    let mut p = client();
    p.publish.retain(|s| !s.starts_with("$JS."));
    p.publish
        .extend(ask_subjects(&[Verb::Inspect, Verb::Reset]));
    p.publish.extend([
        format!("$SRV.PING.{STATUS_SERVICE}"),
        format!("$SRV.INFO.{STATUS_SERVICE}.>"),
        format!("$SRV.STATS.{STATUS_SERVICE}.>"),
        format!("$SRV.INFO.{STATUS_SERVICE}"),
        format!("$SRV.STATS.{STATUS_SERVICE}"),
        kv_write(POLICY_BUCKET),
    ]);
    for bucket in [POLICY_BUCKET, LEASE_BUCKET, SNAPSHOT_BUCKET] {
        p.publish.extend(js_read(&bucket_stream(bucket)));
    }
    p.publish.extend(js_pull(ALERT_STREAM));
    p
}

/// Writes the `authorization { users = [...] }` block for `users`.
pub(super) fn render(
    w: &mut fmt::Formatter<'_>,
    users: &[RoleUser],
    usage_steps: &[String],
    links: Option<&RegionLinks>,
) -> fmt::Result {
    writeln!(
        w,
        "\n# Who may do what (SPEC §10; docs/SECURITY.md): one user per role,\n\
         # each with allow lists; anything not listed is refused by the server.\n\
         # Users in this top-level block belong to the default account ($G), which\n\
         # holds the mappings above and JetStream, so both work for every user.\n\
         # The internal streams: KV_{LEASE_BUCKET}, KV_{SNAPSHOT_BUCKET},\n\
         # KV_{POLICY_BUCKET} (KV buckets) and {JOURNAL_STREAM} ({JOURNAL_SUBJECTS})."
    )?;
    writeln!(w, "authorization {{")?;
    writeln!(w, "  users = [")?;
    for user in users {
        let p = permissions(user.role, usage_steps);
        writeln!(w, "    # {}", role_summary(user.role))?;
        writeln!(w, "    {{")?;
        writeln!(w, "      user: {}", quote(user.role.name()))?;
        match &user.password {
            Password::Literal(p) => writeln!(w, "      password: {}", quote(p))?,
            Password::FromEnv => writeln!(w, "      password: ${}", user.role.password_env())?,
        }
        writeln!(w, "      permissions: {{")?;
        write_list(w, "publish", &p.publish)?;
        write_list(w, "subscribe", &p.subscribe)?;
        if p.allow_responses {
            writeln!(w, "        allow_responses: true")?;
        }
        writeln!(w, "      }}")?;
        writeln!(w, "    }}")?;
    }
    if let Some(links) = links {
        links.render_link_user(w)?;
    }
    writeln!(w, "  ]")?;
    writeln!(w, "}}")?;
    Ok(())
}

fn write_list(w: &mut fmt::Formatter<'_>, name: &str, subjects: &[String]) -> fmt::Result {
    writeln!(w, "        {name}: {{ allow: [")?;
    for s in subjects {
        writeln!(w, "          {}", quote(s))?;
    }
    writeln!(w, "        ] }}")
}

fn role_summary(role: Role) -> &'static str {
    match role {
        Role::Client => {
            "client: asks (rl.allow, rl.hit, rl.usage, rl.top, batches), replies, reads policies"
        }
        Role::Worker => "worker: partitions, leases, snapshots, journal, status service",
        Role::Admin => "admin: a client plus inspect, reset, policy edits and status",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nats_config::NatsServerConfig;

    fn default_steps() -> Vec<String> {
        crate::usage::UsageConfig::default()
            .tiers
            .iter()
            .map(|t| t.name())
            .collect()
    }

    /// A NATS subject pattern match (`*` one token, `>` the rest).
    fn matches(pattern: &str, subject: &str) -> bool {
        let mut p = pattern.split('.');
        let mut s = subject.split('.');
        loop {
            match (p.next(), s.next()) {
                (Some(">"), Some(_)) => return true,
                (Some("*"), Some(_)) => {}
                (Some(a), Some(b)) if a == b => {}
                (None, None) => return true,
                _ => return false,
            }
        }
    }

    fn may_publish(role: Role, subject: &str) -> bool {
        permissions(role, &default_steps())
            .publish
            .iter()
            .any(|p| matches(p, subject))
    }

    fn may_subscribe(role: Role, subject: &str) -> bool {
        permissions(role, &default_steps())
            .subscribe
            .iter()
            .any(|p| matches(p, subject))
    }

    #[test]
    fn a_client_asks_but_touches_nothing_internal() {
        for ok in [
            "rl.allow.bob",
            "rl.hit.bob",
            "rl.usage.bob",
            "rl.top",
            "rl.p.3.batch",
            "rl.w.w1.batch",
            "rl.p.3.allow.bob",
            "rl.p.3.hit.bob",
            "$JS.API.STREAM.INFO.KV_sluice-policies",
            "$JS.API.CONSUMER.CREATE.KV_sluice-policies.x.$KV.sluice-policies.>",
        ] {
            assert!(may_publish(Role::Client, ok), "{ok}");
        }
        for refused in [
            "rl.p.3.reset.bob",
            "rl.p.3.inspect.bob",
            "rl.p.3.other",
            "rl.w.w1.other",
            "rl.inspect.bob",
            "rl.reset.bob",
            "$KV.sluice-leases.p.3",
            "$KV.sluice-snapshots.p.3",
            "$KV.sluice-policies.default",
            "sluice.journal.w.w1",
            "$JS.API.STREAM.DELETE.KV_sluice-leases",
            "$JS.API.STREAM.PURGE.KV_sluice-policies",
            "$JS.API.STREAM.INFO.KV_sluice-leases",
            "$JS.API.CONSUMER.CREATE.KV_sluice-leases",
            "$JS.API.DIRECT.GET.KV_sluice-snapshots",
            "$SRV.PING.sluice-worker",
        ] {
            assert!(!may_publish(Role::Client, refused), "{refused}");
        }
        assert!(may_subscribe(Role::Client, "_INBOX.x.y"));
        assert!(may_subscribe(
            Role::Client,
            "rl.p.*.allow.sluice-client-probe-0"
        ));
        for refused in [
            "rl.p.3.allow.bob",
            "rl.p.>",
            "rl.w.w1.batch",
            "rl.>",
            "$SRV.>",
        ] {
            assert!(!may_subscribe(Role::Client, refused), "{refused}");
        }
        assert!(!permissions(Role::Client, &[]).allow_responses);
    }

    #[test]
    fn an_admin_is_a_client_that_also_inspects_resets_and_edits_policies() {
        for ok in [
            "rl.allow.bob",
            "rl.inspect.bob",
            "rl.reset.bob",
            "rl.p.3.reset.bob",
            "$KV.sluice-policies.default",
            "$SRV.PING.sluice-worker",
            "$SRV.STATS.sluice-worker.abc",
            "$JS.API.STREAM.INFO.KV_sluice-leases",
        ] {
            assert!(may_publish(Role::Admin, ok), "{ok}");
        }
        for refused in [
            "rl.p.3.other",
            "$KV.sluice-leases.p.3",
            "$KV.sluice-snapshots.p.3",
            "sluice.journal.w.w1",
            "$JS.API.STREAM.DELETE.KV_sluice-leases",
            "$JS.API.STREAM.PURGE.KV_sluice-snapshots",
        ] {
            assert!(!may_publish(Role::Admin, refused), "{refused}");
        }
        assert!(!may_subscribe(Role::Admin, "rl.p.3.allow.bob"));
    }

    #[test]
    fn a_worker_serves_partitions_and_keeps_its_streams() {
        for ok in [
            "rl.p.3.allow.*",
            "rl.w.w1.batch",
            "rl.allow.>",
            "$SRV.PING",
            "sluice.status.w1",
        ] {
            assert!(may_subscribe(Role::Worker, ok), "{ok}");
        }
        for ok in [
            "$KV.sluice-leases.p.3",
            "$KV.sluice-snapshots.p.3.g1.c0",
            "sluice.journal.w.w1",
            "$JS.API.STREAM.CREATE.KV_sluice-policies",
            "$JS.API.STREAM.PURGE.KV_sluice-snapshots",
            "$JS.API.CONSUMER.CREATE.SLUICE_JOURNAL.c.sluice.journal.w.w1",
            "$JS.API.CONSUMER.MSG.NEXT.SLUICE_JOURNAL.c",
            "$JS.ACK.SLUICE_JOURNAL.c.1.2.3.4.5",
        ] {
            assert!(may_publish(Role::Worker, ok), "{ok}");
        }
        assert!(!may_publish(Role::Worker, "$KV.sluice-policies.default"));
        assert!(!may_publish(Role::Worker, "$JS.API.STREAM.DELETE.OTHER"));
        assert!(permissions(Role::Worker, &[]).allow_responses);
    }

    #[test]
    fn the_config_has_one_user_per_role_with_its_lists() {
        let mut config = NatsServerConfig::new(16);
        config.users = Role::ALL
            .into_iter()
            .map(|role| RoleUser {
                role,
                password: format!("pw-{role}\"x").into(),
            })
            .collect();
        let text = config.render();
        assert!(text.contains("authorization {"), "{text}");
        for role in Role::ALL {
            assert!(text.contains(&format!("user: \"{role}\"")), "{text}");
            assert!(
                text.contains(&format!("password: \"pw-{role}\\\"x\"")),
                "{text}"
            );
        }
        assert_eq!(text.matches("allow_responses: true").count(), 1);
        assert!(text.contains("mappings = {"));
        assert!(!NatsServerConfig::new(16).render().contains("authorization"));
        assert_eq!(Role::Admin.password_env(), "SLUICE_AUTH_ADMIN_PASSWORD");
        assert!(!format!("{:?}", config.users[0]).contains("pw-"));
    }

    #[test]
    fn passwords_from_env_are_variable_references_nats_server_resolves() {
        let mut config = NatsServerConfig::new(16);
        config.users = RoleUser::every(|_| Password::FromEnv);
        let text = config.render();
        for role in Role::ALL {
            let line = format!("password: ${}\n", role.password_env());
            assert!(text.contains(&line), "{text}");
        }
    }
}
