//! Asks that may wait for a later start (SPEC §18) over HTTP.
//!
//! An ask gives its wait as `?wait=<duration>` (`250ms`, `2s`: the config's
//! durations, whole units), as the `Sluice-Wait` header with the same
//! value, or as `wait_ms` in a body: one of them, since two that disagree
//! could only be a mistake. The worker refuses a wait over the policy's
//! `max_wait` (400 with its sentence). Why a duration and not a bare
//! number: `wait=250` would read as seconds to some and ms to others.
//!
//! Proxy mode paces rather than denies when its policy has a `max_wait`:
//! each request asks to wait up to it and, allowed for a later start,
//! is held that long before it goes upstream (`crate::proxy`). The
//! policy decides, not the caller: a proxied request's headers go to the
//! upstream, and its callers are whoever reaches the gateway.

use axum::http::HeaderMap;
use sluice_client::Error;
use sluice_core::duration::parse_duration;
use std::time::Duration;

/// The request header that carries an ask's wait.
pub(crate) const WAIT_HEADER: &str = "sluice-wait";

/// A wait as the query or the header writes it, `from` naming which.
pub(crate) fn parse_wait(value: &str, from: &str) -> Result<Duration, Error> {
    parse_duration(value).map_err(|e| {
        Error::BadRequest(format!(
            "{from} must be how long the ask may wait for its start, an integer and a unit (e.g. \"250ms\", \"2s\"): {e}"
        ))
    })
}

/// The `Sluice-Wait` header's wait, if any.
pub(crate) fn wait_header(headers: &HeaderMap) -> Result<Option<Duration>, Error> {
    let Some(value) = headers.get(WAIT_HEADER) else {
        return Ok(None);
    };
    let value = value
        .to_str()
        .map_err(|_| Error::BadRequest("the Sluice-Wait header must be printable ASCII".into()))?;
    parse_wait(value, "the Sluice-Wait header").map(Some)
}

/// An ask's one wait: from the query, the header or the body's `wait_ms`
/// (0: not given), at most one of them.
pub(crate) fn one_wait(
    query: Option<Duration>,
    header: Option<Duration>,
    body_ms: u64,
) -> Result<Duration, Error> {
    let body = (body_ms > 0).then(|| Duration::from_millis(body_ms));
    let given: Vec<_> = [
        ("?wait=", query),
        ("the Sluice-Wait header", header),
        ("the body's \"wait_ms\"", body),
    ]
    .into_iter()
    .filter_map(|(name, wait)| Some((name, wait?)))
    .collect();
    match given.as_slice() {
        [] => Ok(Duration::ZERO),
        [(_, wait)] => Ok(*wait),
        [(first, _), (second, _), ..] => Err(Error::BadRequest(format!(
            "{first} and {second} both give the ask's wait; give it once"
        ))),
    }
}

/// The `Sluice-Wait` header, as the description lists it.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)] // read by `wait_header`
pub(crate) struct WaitHeader {
    /// How long the ask may wait for its start instead of being denied
    /// (SPEC §18), as `?wait=` gives it: an integer and a unit (`250ms`,
    /// `2s`), at most the policy's `max_wait`.
    #[param(rename = "Sluice-Wait", pattern = "^[0-9]+(ms|s|m|h|d)$")]
    sluice_wait: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn a_wait_is_a_duration_with_its_unit() {
        let q = |v| parse_wait(v, "?wait=");
        assert_eq!(q("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(q("2s").unwrap(), Duration::from_secs(2));
        for bad in ["250", "", "-1s", "1.5s", "soon"] {
            let e = q(bad).unwrap_err();
            assert_eq!(e.status(), 400, "{bad}");
            assert!(e.message().contains("e.g. \"250ms\""), "{e}");
        }
        let mut h = HeaderMap::new();
        assert_eq!(wait_header(&h).unwrap(), None);
        h.insert(WAIT_HEADER, HeaderValue::from_static("1s"));
        assert_eq!(wait_header(&h).unwrap(), Some(Duration::from_secs(1)));
        h.insert(WAIT_HEADER, HeaderValue::from_static("1"));
        assert!(wait_header(&h)
            .unwrap_err()
            .message()
            .contains("Sluice-Wait"));
    }

    #[test]
    fn an_ask_gives_its_wait_once() {
        let s = Some(Duration::from_secs(1));
        assert_eq!(one_wait(None, None, 0).unwrap(), Duration::ZERO);
        assert_eq!(one_wait(s, None, 0).unwrap(), Duration::from_secs(1));
        assert_eq!(one_wait(None, s, 0).unwrap(), Duration::from_secs(1));
        assert_eq!(
            one_wait(None, None, 300).unwrap(),
            Duration::from_millis(300)
        );
        let e = one_wait(s, s, 0).unwrap_err();
        assert!(e.message().contains("Sluice-Wait"), "{e}");
        assert!(one_wait(s, None, 1000).is_err());
    }
}
