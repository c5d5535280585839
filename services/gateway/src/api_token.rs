//! `--api-token` (SPEC §10): `/v1/*` answers only requests that carry
//! `Authorization: Bearer <token>`, and the Envoy rate limit service only
//! calls with the same `authorization` metadata (the dashboard asks for it
//! once, on its login page: `ui/gate.rs`); `/healthz` and `/metrics`
//! stay open (a load balancer and Prometheus need them), and so does proxy
//! mode, whose callers are the upstream's own users.
//!
//! With `--api-read-token` too, a second token may read and nothing else:
//! usage, top keys, inspect, policies, alerts and status. The routes that
//! ask, count, reset or write need the full token; the read token on them
//! is 403 `forbidden` ([`Role`]), so a dashboard or a monitoring job can
//! be given a token that cannot change a counter or a policy. Named
//! tokens of either role come from `--api-tokens FILE` (`tokens.rs`),
//! reloaded on SIGHUP.
//!
//! The comparison runs in constant time for tokens of the right length
//! (`subtle`), so timing does not tell an attacker how much of a guess was
//! right. A refusal is 401 with a JSON error and `WWW-Authenticate: Bearer`
//! (403 for the read token where it may not), and is answered before
//! anything is asked or counted.

use std::fmt;
use std::sync::Arc;
use subtle::ConstantTimeEq;

/// The token `/v1/*` requires; never shown in logs or `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiToken(Arc<str>);

impl ApiToken {
    pub fn new(token: impl Into<String>) -> ApiToken {
        ApiToken(Arc::from(token.into()))
    }

    /// Whether `authorization` (an HTTP header's or gRPC metadata's value)
    /// is `Bearer <this token>`.
    pub(crate) fn admits(&self, authorization: Option<&[u8]>) -> bool {
        let Some(given) = authorization
            .and_then(|v| v.strip_prefix(b"Bearer "))
            .map(|t| t.trim_ascii())
        else {
            return false;
        };
        self.is(given)
    }

    /// Whether `given` is this token (the dashboard's login form).
    pub(crate) fn is(&self, given: &[u8]) -> bool {
        given.ct_eq(self.0.as_bytes()).into()
    }
}

impl fmt::Debug for ApiToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiToken(***)")
    }
}

/// What a route of `/v1/*` needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// It only reads (usage, inspect, policies, alerts, status): the full
    /// token or the read token.
    Read,
    /// It asks, counts, resets or writes: the full token only.
    Full,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_bearer_token_is_admitted() {
        let token = ApiToken::new("s3cret");
        let h = |s: &'static str| s.as_bytes();
        assert!(token.admits(Some(h("Bearer s3cret"))));
        for wrong in [
            "Bearer s3cre",
            "Bearer s3cret2",
            "Basic s3cret",
            "s3cret",
            "Bearer ",
        ] {
            assert!(!token.admits(Some(h(wrong))), "{wrong}");
        }
        assert!(!token.admits(None));
        assert_eq!(format!("{token:?}"), "ApiToken(***)");
    }
}
