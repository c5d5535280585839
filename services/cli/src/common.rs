//! The flags every command takes ([`Common`]): the NATS server, its
//! credentials, the config file and the form of log lines. Apart from the command line
//! (`cli.rs`), which names every command, so that each command can take
//! them without depending on the others.

use anyhow::Result;
use sluice_client::{KeyPath, NatsAuth};
use sluice_core::config::Config;
use std::path::PathBuf;

/// Flags every command takes.
#[derive(clap::Args, Debug, Clone)]
pub struct Common {
    /// NATS server URL; several, comma-separated, for a cluster.
    #[arg(
        long,
        global = true,
        env = "SLUICE_NATS_URL",
        default_value = "nats://127.0.0.1:4222"
    )]
    pub nats: String,
    /// Config file (TOML). Without one, the built-in default policy (15 per second) applies.
    #[arg(long, global = true, env = "SLUICE_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub auth: NatsAuthArgs,
    /// How log lines are written to stderr: text, or json (one object per line).
    #[arg(
        long,
        global = true,
        env = "SLUICE_LOG_FORMAT",
        value_enum,
        default_value_t = crate::logging::LogFormat::Text
    )]
    pub log_format: crate::logging::LogFormat,
}

/// NATS credentials and TLS (SPEC §10), for every command. At most one
/// of creds, nkey, user/password and token; TLS with any of them.
#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "NATS credentials and TLS")]
pub struct NatsAuthArgs {
    /// A NATS .creds file (user JWT and nkey seed).
    #[arg(long, global = true, env = "SLUICE_NATS_CREDS", value_name = "FILE")]
    pub nats_creds: Option<PathBuf>,
    /// A file holding a NATS user nkey seed (SU...).
    #[arg(long, global = true, env = "SLUICE_NATS_NKEY", value_name = "FILE")]
    pub nats_nkey: Option<PathBuf>,
    /// NATS user name (with --nats-password), e.g. a role of `sluice nats-config --auth`.
    #[arg(long, global = true, env = "SLUICE_NATS_USER")]
    pub nats_user: Option<String>,
    /// NATS password of --nats-user (prefer the env var: arguments are visible in ps).
    #[arg(
        long,
        global = true,
        env = "SLUICE_NATS_PASSWORD",
        hide_env_values = true
    )]
    pub nats_password: Option<String>,
    /// NATS token.
    #[arg(long, global = true, env = "SLUICE_NATS_TOKEN", hide_env_values = true)]
    pub nats_token: Option<String>,
    /// PEM file of the CA that signed the NATS server's certificate (requires TLS).
    #[arg(long, global = true, env = "SLUICE_NATS_TLS_CA", value_name = "FILE")]
    pub nats_tls_ca: Option<PathBuf>,
    /// PEM client certificate for mutual TLS (with --nats-tls-key).
    #[arg(long, global = true, env = "SLUICE_NATS_TLS_CERT", value_name = "FILE")]
    pub nats_tls_cert: Option<PathBuf>,
    /// PEM private key of --nats-tls-cert.
    #[arg(long, global = true, env = "SLUICE_NATS_TLS_KEY", value_name = "FILE")]
    pub nats_tls_key: Option<PathBuf>,
}

impl Common {
    /// The NATS credentials and TLS settings given.
    pub fn nats_auth(&self) -> NatsAuth {
        let a = &self.auth;
        NatsAuth {
            creds: a.nats_creds.clone(),
            nkey: a.nats_nkey.clone(),
            user: a.nats_user.clone(),
            password: a.nats_password.clone(),
            token: a.nats_token.clone(),
            tls_ca: a.nats_tls_ca.clone(),
            tls_cert: a.nats_tls_cert.clone(),
            tls_key: a.nats_tls_key.clone(),
        }
    }

    /// A NATS connection to `--nats` with the credentials given, named
    /// `name`; a failure says what failed, in one line.
    pub async fn connect(&self, name: &str) -> Result<async_nats::Client> {
        Ok(self.nats_auth().connect_named(&self.nats, name).await?)
    }

    pub fn load_config(&self) -> Result<Config> {
        match &self.config {
            Some(path) => Ok(Config::load(path)?),
            None => Ok(Config::default()),
        }
    }
}

/// A duration flag (`"100ms"`, `"2s"`), as the config writes durations.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    sluice_core::config::parse_duration(s).map_err(|e| e.to_string())
}

/// `--otlp-endpoint`: the collector a server exports its traces to, over
/// OTLP/HTTP (docs/OPERATIONS.md, "Traces"). Off unless given.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TraceArgs {
    /// Export OpenTelemetry traces over OTLP/HTTP to this collector, e.g.
    /// http://127.0.0.1:4318 (off unless given).
    #[arg(long, env = "SLUICE_OTLP_ENDPOINT", value_name = "URL")]
    pub otlp_endpoint: Option<sluice_gateway::Url>,
}

impl TraceArgs {
    /// The exporter of `service`'s spans, when `--otlp-endpoint` is given.
    /// Call [`sluice_traces::Traces::shutdown`] once the server stopped.
    pub fn start(&self, service: &'static str) -> Result<Option<sluice_traces::Traces>> {
        self.otlp_endpoint
            .as_ref()
            .map(|endpoint| sluice_traces::Traces::start(endpoint, service))
            .transpose()
    }
}

/// The help of a command's key argument.
pub const KEY_HELP: &str = "The key (any text; it is percent-encoded for you). A key of an \
organisation's user is written org/key or org/team/key (SPEC §17: every level of the policy's \
chain is decided at once); with --one-key a '/' is part of the key instead";

/// How a command reads its key: `acme/eng/alice` is a key path of three
/// tokens, split at `/` (SPEC §17, docs/GROUPS.md); with `--one-key` the
/// whole text is one key, `/` and all (how a plain key with a `/` in it
/// is still asked).
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct KeyForm {
    /// Take the key as one key, '/' included, not as org/key or
    /// org/team/key.
    #[arg(long)]
    pub one_key: bool,
}

impl KeyForm {
    /// The key `text` names.
    pub fn key(self, text: &str) -> Result<KeyPath> {
        let path = if self.one_key {
            KeyPath::new([text])
        } else {
            KeyPath::from_shown(text)
        };
        path.map_err(|e| {
            let hint = if self.one_key || !text.contains('/') {
                ""
            } else {
                " (a key with a '/' in it: give --one-key)"
            };
            anyhow::anyhow!("{}: {}{hint}", e.code().word(), e.message())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::KeyForm;

    #[test]
    fn a_key_is_split_at_slashes_unless_one_key_is_asked_for() {
        let split = KeyForm { one_key: false };
        let whole = KeyForm { one_key: true };
        assert_eq!(
            split.key("acme/eng/alice").unwrap().token(),
            "acme.eng.alice"
        );
        assert_eq!(split.key("bob@x.io").unwrap().token(), "bob%40x%2Eio");
        assert_eq!(whole.key("a/b").unwrap().token(), "a%2Fb");
        let e = split.key("a/b/c/d").unwrap_err().to_string();
        assert!(e.contains("at most 3") && e.contains("--one-key"), "{e}");
        let e = split.key("").unwrap_err().to_string();
        assert!(!e.contains("--one-key"), "no '/' to keep: {e}");
    }
}
