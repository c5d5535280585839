//! NATS credentials and TLS (SPEC §10): the one place that turns
//! `--nats-creds`, `--nats-nkey`, `--nats-user`/`--nats-password`,
//! `--nats-token`, `--nats-tls-ca` and `--nats-tls-cert`/`--nats-tls-key`
//! into [`async_nats::ConnectOptions`], and the one place that connects.
//!
//! Why one place: every sluice process (worker, gateway, the CLI's
//! commands, this crate's [`Client`](crate::Client)) connects the same way,
//! and a copy that forgot the TLS CA or mapped an error differently would
//! be a process that cannot run on a secured NATS system, or that hides why.
//!
//! Failures are meant to be read by an operator, in one line, naming what
//! failed: a file that cannot be read (checked before connecting, so the
//! message names the file and the flag), credentials the server refused
//! (an authorization violation), a TLS handshake that failed, or a server
//! that cannot be reached. None of them is retried: the initial connect is
//! made once over the listed servers (no `retry_on_initial_connect`, which
//! would return at once and retry in the background, hiding a refused
//! login behind requests that never leave), and async-nats itself stops at
//! the first authorization violation instead of trying the other servers.

use async_nats::{ConnectErrorKind, ConnectOptions, Event, ServerError};
use std::fmt;
use std::path::{Path, PathBuf};

/// How to authenticate to NATS and whether to use TLS. All fields are
/// optional; the default is an open connection, as before SPEC §10.
///
/// At most one way of authenticating may be given: a creds file, an nkey
/// seed file, a user and password, or a token. TLS options go with any of
/// them (or none: a server that only wants TLS).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct NatsAuth {
    /// A `.creds` file (a user JWT and its nkey seed), as `nsc` writes it.
    pub creds: Option<PathBuf>,
    /// A file holding a user nkey seed (`SU...`).
    pub nkey: Option<PathBuf>,
    /// A user name; needs [`NatsAuth::password`].
    pub user: Option<String>,
    /// The user's password.
    pub password: Option<String>,
    /// A token.
    pub token: Option<String>,
    /// A PEM file of the CA(s) that signed the server's certificate; also
    /// makes TLS required.
    pub tls_ca: Option<PathBuf>,
    /// A PEM client certificate, for servers that verify clients (mutual
    /// TLS); needs [`NatsAuth::tls_key`].
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key of [`NatsAuth::tls_cert`].
    pub tls_key: Option<PathBuf>,
}

/// Secrets stay out of logs: the password and the token are shown as `***`.
impl fmt::Debug for NatsAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hidden = |s: &Option<String>| s.as_ref().map(|_| "***");
        f.debug_struct("NatsAuth")
            .field("creds", &self.creds)
            .field("nkey", &self.nkey)
            .field("user", &self.user)
            .field("password", &hidden(&self.password))
            .field("token", &hidden(&self.token))
            .field("tls_ca", &self.tls_ca)
            .field("tls_cert", &self.tls_cert)
            .field("tls_key", &self.tls_key)
            .finish()
    }
}

/// Why no NATS connection was made, as one line for the operator.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NatsConnectError {
    /// The options cannot work as given (a password without a user, two
    /// ways of authenticating, a certificate without its key), or a file
    /// they name cannot be read or holds nothing usable.
    #[error("{0}")]
    Credentials(String),
    /// The server refused the credentials (or wanted some and got none).
    #[error("NATS at {url} refused the connection: authorization violation ({hint})")]
    Refused { url: String, hint: String },
    /// The TLS handshake failed (wrong CA, a server without TLS, a client
    /// certificate the server does not accept).
    #[error("TLS with NATS at {url} failed: {detail}; check --nats-tls-ca (the CA that signed the server's certificate) and, for mutual TLS, --nats-tls-cert/--nats-tls-key")]
    Tls { url: String, detail: String },
    /// Anything else: no server listening, DNS, a timeout.
    #[error("cannot connect to NATS at {url}: {detail}; is nats-server running there?")]
    Unreachable { url: String, detail: String },
}

impl NatsAuth {
    /// True when nothing is set: an open, plain connection.
    pub fn is_empty(&self) -> bool {
        *self == NatsAuth::default()
    }

    /// Fresh [`ConnectOptions`] with these credentials and TLS settings, and
    /// an event callback that logs what the server refuses later (a
    /// permission violation arrives as an asynchronous server error, not as
    /// the failure of the call that caused it). Reads the credential files
    /// now, so a missing or unreadable file is reported by name.
    pub fn connect_options(&self) -> Result<ConnectOptions, NatsConnectError> {
        let methods = [
            ("--nats-creds", self.creds.is_some()),
            ("--nats-nkey", self.nkey.is_some()),
            ("--nats-user", self.user.is_some()),
            ("--nats-token", self.token.is_some()),
        ];
        let given: Vec<&str> = methods.iter().filter(|m| m.1).map(|m| m.0).collect();
        if given.len() > 1 {
            return Err(NatsConnectError::Credentials(format!(
                "give one way to authenticate to NATS, not {}",
                given.join(" and ")
            )));
        }
        let mut opts = ConnectOptions::new();
        if let Some(path) = &self.creds {
            let text = read("--nats-creds (SLUICE_NATS_CREDS)", "credentials", path)?;
            opts = opts.credentials(&text).map_err(|e| {
                NatsConnectError::Credentials(format!(
                    "the NATS credentials file {} is not a valid .creds file: {e}",
                    path.display()
                ))
            })?;
        }
        if let Some(path) = &self.nkey {
            let text = read("--nats-nkey (SLUICE_NATS_NKEY)", "nkey seed", path)?;
            opts = opts.nkey(nkey_seed(&text).ok_or_else(|| {
                NatsConnectError::Credentials(format!(
                    "the nkey file {} holds no user nkey seed (a line starting with SU)",
                    path.display()
                ))
            })?);
        }
        match (&self.user, &self.password) {
            (Some(user), Some(password)) => {
                opts = opts.user_and_password(user.clone(), password.clone());
            }
            (Some(user), None) => {
                return Err(NatsConnectError::Credentials(format!(
                    "--nats-user {user} needs --nats-password (or SLUICE_NATS_PASSWORD)"
                )))
            }
            (None, Some(_)) => {
                return Err(NatsConnectError::Credentials(
                    "--nats-password (or SLUICE_NATS_PASSWORD) needs --nats-user".into(),
                ))
            }
            (None, None) => {}
        }
        if let Some(token) = &self.token {
            opts = opts.token(token.clone());
        }
        if let Some(ca) = &self.tls_ca {
            read("--nats-tls-ca (SLUICE_NATS_TLS_CA)", "TLS CA", ca)?;
            opts = opts.add_root_certificates(ca.clone()).require_tls(true);
        }
        match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => {
                read(
                    "--nats-tls-cert (SLUICE_NATS_TLS_CERT)",
                    "TLS certificate",
                    cert,
                )?;
                read("--nats-tls-key (SLUICE_NATS_TLS_KEY)", "TLS key", key)?;
                opts = opts
                    .add_client_certificate(cert.clone(), key.clone())
                    .require_tls(true);
            }
            (None, None) => {}
            _ => return Err(NatsConnectError::Credentials(
                "--nats-tls-cert and --nats-tls-key go together (a client certificate and its key)"
                    .into(),
            )),
        }
        Ok(opts.event_callback(|event| async move { log_event(event) }))
    }

    /// Connects with `opts` (from [`NatsAuth::connect_options`], plus the
    /// caller's name and timeouts) to `url`, one URL or several separated
    /// by commas. One attempt over the listed servers; a failure says what
    /// failed.
    pub async fn connect(
        &self,
        url: &str,
        opts: ConnectOptions,
    ) -> Result<async_nats::Client, NatsConnectError> {
        let servers = sluice_core::nats_config::server_urls(url);
        opts.connect(servers)
            .await
            .map_err(|e| self.explain(url, &e))
    }

    /// [`NatsAuth::connect_options`] then [`NatsAuth::connect`], with the
    /// connection named `name`.
    pub async fn connect_named(
        &self,
        url: &str,
        name: &str,
    ) -> Result<async_nats::Client, NatsConnectError> {
        let opts = self.connect_options()?.name(name);
        self.connect(url, opts).await
    }

    fn explain(&self, url: &str, e: &async_nats::ConnectError) -> NatsConnectError {
        let url = url.to_string();
        match e.kind() {
            ConnectErrorKind::AuthorizationViolation | ConnectErrorKind::Authentication => {
                let hint = if self.creds.is_none()
                    && self.nkey.is_none()
                    && self.user.is_none()
                    && self.token.is_none()
                {
                    "no credentials were given; pass --nats-user/--nats-password, --nats-creds, \
                     --nats-nkey or --nats-token"
                        .to_string()
                } else {
                    format!("the server does not accept {}", self.method())
                };
                NatsConnectError::Refused { url, hint }
            }
            // A failed handshake (an unknown CA, a refused client
            // certificate) comes as an IO error carrying rustls' reason.
            _ if e.kind() == ConnectErrorKind::Tls || looks_like_tls(&e.to_string()) => {
                NatsConnectError::Tls {
                    url,
                    detail: e.to_string(),
                }
            }
            _ => NatsConnectError::Unreachable {
                url,
                detail: e.to_string(),
            },
        }
    }

    /// The credentials given, for a refusal's message (no secrets).
    fn method(&self) -> String {
        if let Some(user) = &self.user {
            format!("user {user:?} with that password")
        } else if let Some(p) = &self.creds {
            format!("the credentials in {}", p.display())
        } else if let Some(p) = &self.nkey {
            format!("the nkey in {}", p.display())
        } else {
            "that token".to_string()
        }
    }
}

/// Whether a connect error's text is about TLS (async-nats reports
/// handshake failures as IO errors).
fn looks_like_tls(text: &str) -> bool {
    let text = text.to_ascii_lowercase();
    ["certificate", "tls", "handshake", "ssl"]
        .iter()
        .any(|w| text.contains(w))
}

/// Reads a file named by `flag`, or says which one could not be read.
fn read(flag: &str, what: &str, path: &Path) -> Result<String, NatsConnectError> {
    std::fs::read_to_string(path).map_err(|e| {
        NatsConnectError::Credentials(format!(
            "cannot read the NATS {what} file {} (given by {flag}): {e}",
            path.display()
        ))
    })
}

/// The user seed in an nkey file: the first line (trimmed) that starts
/// with `SU`. Files written by `nk -gen user` hold just that line.
fn nkey_seed(text: &str) -> Option<String> {
    text.lines()
        .map(str::trim)
        .find(|l| l.starts_with("SU"))
        .map(String::from)
}

/// The last permission violation the server reported to this process.
static LAST_REFUSAL: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// The last "Permissions Violation for ..." the NATS server sent to any
/// connection of this process, if any. A refused publish or subscription
/// does not fail the call that made it (NATS reports it asynchronously; a
/// refused request then just times out), so a command that failed looks
/// here to say why in its one line.
pub fn last_refusal() -> Option<String> {
    LAST_REFUSAL
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
}

/// What the server refuses after the connection is up (a subject this
/// user may not publish or subscribe to) arrives here, not at the call
/// that caused it; it is logged so the operator sees which permission is
/// missing, and kept for [`last_refusal`].
fn log_event(event: Event) {
    match event {
        Event::ServerError(ServerError::Other(e)) if e.contains("Permissions Violation") => {
            *LAST_REFUSAL.lock().unwrap_or_else(|e| e.into_inner()) = Some(e.clone());
            tracing::warn!(
                "the NATS server refused: {e}; this NATS user lacks the permission \
                 (see docs/SECURITY.md for what each role may do)"
            );
        }
        Event::ServerError(e) => tracing::warn!("NATS server error: {e}"),
        Event::Disconnected => tracing::warn!("disconnected from NATS; reconnecting"),
        Event::Connected => tracing::debug!("connected to NATS"),
        other => tracing::debug!("NATS event: {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(auth: &NatsAuth) -> String {
        auth.connect_options().expect_err("refused").to_string()
    }

    #[test]
    fn one_way_to_authenticate_and_pairs_go_together() {
        let two = NatsAuth {
            token: Some("t".into()),
            user: Some("u".into()),
            password: Some("p".into()),
            ..NatsAuth::default()
        };
        assert!(
            err(&two).contains("--nats-user and --nats-token"),
            "{}",
            err(&two)
        );
        let no_password = NatsAuth {
            user: Some("u".into()),
            ..NatsAuth::default()
        };
        assert!(err(&no_password).contains("needs --nats-password"));
        let half_tls = NatsAuth {
            tls_cert: Some("c.pem".into()),
            ..NatsAuth::default()
        };
        assert!(err(&half_tls).contains("go together"));
        assert!(NatsAuth::default().connect_options().is_ok());
        assert!(NatsAuth::default().is_empty());
    }

    #[test]
    fn an_unreadable_file_is_named_with_its_flag() {
        let auth = NatsAuth {
            creds: Some("/nonexistent/x.creds".into()),
            ..NatsAuth::default()
        };
        let e = err(&auth);
        assert!(
            e.contains("/nonexistent/x.creds") && e.contains("--nats-creds"),
            "{e}"
        );
        let ca = NatsAuth {
            tls_ca: Some("/nonexistent/ca.pem".into()),
            ..NatsAuth::default()
        };
        assert!(err(&ca).contains("--nats-tls-ca"), "{}", err(&ca));
    }

    #[test]
    fn the_seed_is_found_and_secrets_are_not_shown() {
        assert_eq!(
            nkey_seed("# comment\n  SUAB\n").as_deref(),
            Some("SUAB"),
            "the SU line"
        );
        assert_eq!(nkey_seed("UAB\n"), None);
        let auth = NatsAuth {
            user: Some("u".into()),
            password: Some("hunter2".into()),
            token: Some("tok".into()),
            ..NatsAuth::default()
        };
        let shown = format!("{auth:?}");
        assert!(
            !shown.contains("hunter2") && !shown.contains("tok\""),
            "{shown}"
        );
    }
}
