//! A key as an HTTP path names it: `/{key}`, `/{org}/{key}` or
//! `/{org}/{team}/{key}` (SPEC §17), each segment percent-decoded to a
//! token's bytes; one place for every route that reads a key from its path
//! (the grouped routes in [`crate::grouped`] and the plain ones alike).

use sluice_client::{Error, KeyPath};
use sluice_core::key::MAX_TOKENS;

/// The key a path names after `prefix`: its segments (one to three), each
/// percent-decoded to a token's bytes. Four or more are a 400.
pub(crate) fn key_path(path: &str, prefix: &str) -> Result<KeyPath, Error> {
    let rest = path.strip_prefix(prefix).unwrap_or_default();
    let segments: Vec<Vec<u8>> = rest
        .split('/')
        .map(|s| percent_decode(s.as_bytes()))
        .collect();
    if segments.len() > MAX_TOKENS {
        return Err(too_many(segments.len()));
    }
    KeyPath::new(&segments)
}

pub(crate) fn too_many(segments: usize) -> Error {
    Error::BadRequest(format!(
        "the path names a key of {segments} segments; a key is /{{key}}, /{{org}}/{{key}} or /{{org}}/{{team}}/{{key}} (SPEC §17), and a '/' inside a key is sent as %2F"
    ))
}

/// URL percent-decoding to bytes; a `%` not followed by two hex digits is
/// kept as it is (as browsers and axum do).
pub(crate) fn percent_decode(s: &[u8]) -> Vec<u8> {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'%' {
            if let (Some(hi), Some(lo)) = (
                s.get(i + 1).copied().and_then(hex),
                s.get(i + 2).copied().and_then(hex),
            ) {
                out.push(hi << 4 | lo);
                i += 3;
                continue;
            }
        }
        out.push(s[i]);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_segments_decode_to_the_raw_key_bytes() {
        assert_eq!(percent_decode(b"bob%40x.io"), b"bob@x.io");
        assert_eq!(
            percent_decode(b"bob%40x%2eio"),
            b"bob@x.io",
            "lower-case hex is legal in URLs"
        );
        assert_eq!(percent_decode(b"%FF%fe"), [0xff, 0xfe]);
        assert_eq!(percent_decode(b"100%"), b"100%");
        assert_eq!(percent_decode(b"%zz%4"), b"%zz%4");
    }
}
