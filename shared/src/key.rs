//! Keys as NATS subject tokens, in exactly one spelling.
//!
//! A key (a user id, an API key, an IP, an email: any bytes) travels as the
//! last token of `rl.allow.<key>` (SPEC §1). Bytes outside
//! `[A-Za-z0-9_-]` are percent-encoded as `%` and two **upper-case** hex
//! digits, so `bob@x.io` is sent as `bob%40x%2Eio`, and the result is always
//! one token: no `.`, no whitespace, never a bare `*` or `>`.
//!
//! # Why only one spelling is accepted
//!
//! nats-server picks a key's partition by hashing the token's raw bytes
//! (see [`crate::partition`]). If other spellings such as lower-case hex
//! (`bob%40x%2eio`) or needless escapes (`%62ob%40x%2Eio`) were accepted,
//! one key would have several tokens, which hash to different partitions,
//! are counted by different owners, and each get their own full limit: a
//! limit bypass anyone can use by changing the case of a hex digit. So the canonical token *is* the counter key, and [`KeyToken::parse`]
//! refuses every other spelling. [`encode_key`] and [`KeyToken::decode`] are
//! exact inverses: `decode(encode(b)) == b` for all bytes, and a token that
//! parses is `encode(decode(token))`.
//!
//! [`KeyToken::parse`] runs on every request a worker handles, so its valid
//! path does one pass over at most 256 bytes and allocates nothing.
//!
//! # Grouped keys
//!
//! A key may be grouped (SPEC §17): up to [`MAX_TOKENS`] tokens, outermost
//! first, `acme.eng.alice` for user `alice` of team `eng` of organisation
//! `acme`, each token spelled as above. Its partition is its first token's
//! alone ([`KeyToken::partition`]), so every key of a group lives with its
//! group and one owner decides all its levels in one turn
//! ([`crate::group`]). A level's key is the key cut after its token
//! ([`KeyToken::level`]): `acme.eng` is the team's, `acme` the
//! organisation's, the same counter as a plain key `acme`.

use std::fmt;

/// The longest key token accepted, in bytes, after percent-encoding (SPEC §1).
pub const MAX_TOKEN_LEN: usize = 256;

/// The most tokens a grouped key has: organisation, team, key (SPEC §17).
pub const MAX_TOKENS: usize = 3;

/// What separates a grouped key's tokens in subjects and counter keys.
pub const TOKEN_SEPARATOR: char = '.';

/// What separates a grouped key's tokens where people read and write them
/// (HTTP paths, the CLI, the dashboard): `acme/eng/alice`.
pub const SHOWN_SEPARATOR: char = '/';

/// Bytes that are sent as they are; every other byte is percent-encoded.
pub const fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

const HEX_UPPER: &[u8; 16] = b"0123456789ABCDEF";

/// The length of [`encode_key`]`(key)`, without encoding it.
pub fn encoded_len(key: &[u8]) -> usize {
    key.iter()
        .map(|&b| if is_unreserved(b) { 1 } else { 3 })
        .sum()
}

/// Percent-encodes `key` into its one canonical token.
///
/// This never fails; the result may be empty or longer than
/// [`MAX_TOKEN_LEN`], which [`try_encode_key`] reports.
///
/// ```
/// assert_eq!(sluice_core::key::encode_key(b"bob@x.io"), "bob%40x%2Eio");
/// ```
pub fn encode_key(key: &[u8]) -> String {
    let mut out = String::with_capacity(encoded_len(key));
    for &b in key {
        if is_unreserved(b) {
            out.push(b as char);
        } else {
            out.push('%');
            out.push(HEX_UPPER[usize::from(b >> 4)] as char);
            out.push(HEX_UPPER[usize::from(b & 0x0f)] as char);
        }
    }
    out
}

/// [`encode_key`], refusing keys that no worker would accept (empty, or
/// longer than [`MAX_TOKEN_LEN`] once encoded). Client libraries call this
/// so that the caller hears about a bad key before anything is sent.
pub fn try_encode_key(key: &[u8]) -> Result<String, KeyError> {
    let len = encoded_len(key);
    if len == 0 {
        return Err(KeyError::Empty);
    }
    if len > MAX_TOKEN_LEN {
        return Err(KeyError::TooLong { len });
    }
    Ok(encode_key(key))
}

/// A grouped key (SPEC §17) from its tokens' bytes, outermost first
/// (`[org, team, key]`): each encoded ([`try_encode_key`]), joined by
/// `.`. Refuses no tokens, more than [`MAX_TOKENS`], and any token
/// [`try_encode_key`] refuses.
pub fn try_encode_path(tokens: &[&[u8]]) -> Result<String, KeyError> {
    if tokens.is_empty() {
        return Err(KeyError::Empty);
    }
    if tokens.len() > MAX_TOKENS {
        return Err(KeyError::TooManyTokens {
            tokens: tokens.len(),
        });
    }
    let mut out = String::new();
    for (i, token) in tokens.iter().enumerate() {
        if i > 0 {
            out.push(TOKEN_SEPARATOR);
        }
        if token.is_empty() && tokens.len() > 1 {
            return Err(KeyError::EmptyToken { at: out.len() });
        }
        out.push_str(&try_encode_key(token)?);
    }
    Ok(out)
}

/// Parses `token` and decodes it to the key's bytes.
pub fn decode_key(token: &str) -> Result<Vec<u8>, KeyError> {
    KeyToken::parse(token).map(KeyToken::decode)
}

/// The key a token stands for, as text (lossy for bytes that are not
/// UTF-8); a string that is not a token is returned as it is.
pub fn key_as_asked(token: &str) -> String {
    match decode_key(token) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(_) => token.to_string(),
    }
}

/// Whether a key as asked can be shown as text (no control characters,
/// no bytes that were not UTF-8).
pub fn is_printable(key: &str) -> bool {
    !key.chars()
        .any(|c| c.is_control() || c == char::REPLACEMENT_CHARACTER)
}

/// The group whose member a key token is (SPEC §17): its first token
/// when it has more than one (`acme` of `acme.alice` and of
/// `acme.eng.alice`); `None` for a plain key, a group's own key (`acme`)
/// included. What a top query of one group ranks (`rl.top`'s `group`).
pub fn group_of(token: &str) -> Option<&str> {
    token.split_once(TOKEN_SEPARATOR).map(|(group, _)| group)
}

/// What to show people for a key token: the key as asked, or the token
/// when the key is not printable text.
pub fn shown_key(token: &str) -> String {
    let key = key_as_asked(token);
    if is_printable(&key) {
        key
    } else {
        token.to_string()
    }
}

/// A key token that is known to be canonical: the counter key a worker uses.
///
/// Borrowed from the subject it came in on; [`KeyToken::as_str`] gives the
/// token itself (use it to key counters and to log), [`KeyToken::decode`]
/// the original bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyToken<'a>(&'a str);

impl<'a> KeyToken<'a> {
    /// Accepts exactly the tokens [`encode_key`] produces for a non-empty key
    /// of at most [`MAX_TOKEN_LEN`] encoded bytes, or up to [`MAX_TOKENS`]
    /// such tokens joined by `.` (a grouped key), and nothing else.
    pub fn parse(token: &'a str) -> Result<KeyToken<'a>, KeyError> {
        if token.is_empty() {
            return Err(KeyError::Empty);
        }
        let mut start = 0;
        let mut tokens = 0;
        for part in token.split(TOKEN_SEPARATOR) {
            tokens += 1;
            if tokens > MAX_TOKENS {
                return Err(KeyError::TooManyTokens {
                    tokens: token.split(TOKEN_SEPARATOR).count(),
                });
            }
            if part.is_empty() {
                return Err(KeyError::EmptyToken { at: start });
            }
            check_one(part, start)?;
            start += part.len() + 1;
        }
        Ok(KeyToken(token))
    }

    /// The token as it appears in the subject; the counter key.
    pub fn as_str(self) -> &'a str {
        self.0
    }

    /// The key's original bytes (for display; counting uses the token); a
    /// grouped key's tokens each decoded, joined by [`SHOWN_SEPARATOR`].
    pub fn decode(self) -> Vec<u8> {
        let bytes = self.0.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'%' {
                // `parse` checked that two hex digits follow.
                let hi = hex_value(bytes[i + 1]).unwrap_or(0);
                let lo = hex_value(bytes[i + 2]).unwrap_or(0);
                out.push(hi << 4 | lo);
                i += 3;
            } else if bytes[i] == TOKEN_SEPARATOR as u8 {
                out.push(SHOWN_SEPARATOR as u8);
                i += 1;
            } else {
                out.push(bytes[i]);
                i += 1;
            }
        }
        out
    }

    /// The partition nats-server maps this key to (see [`crate::partition`]):
    /// its first token's, for a grouped key.
    pub fn partition(self, partitions: u32) -> u32 {
        crate::partition::partition_of(self.0, partitions)
    }

    /// How many tokens it has: 1 for a plain key, up to [`MAX_TOKENS`].
    pub fn tokens(self) -> usize {
        self.0.split(TOKEN_SEPARATOR).count()
    }

    /// Whether it has more than one token (SPEC §17).
    pub fn is_grouped(self) -> bool {
        self.0.contains(TOKEN_SEPARATOR)
    }

    /// The key cut after its first `tokens` tokens: `acme.eng` of
    /// `acme.eng.alice` for 2; `None` for 0 or more tokens than it has.
    pub fn level(self, tokens: usize) -> Option<KeyToken<'a>> {
        if tokens == 0 {
            return None;
        }
        let mut ends = self
            .0
            .match_indices(TOKEN_SEPARATOR)
            .map(|(at, _)| at)
            .chain([self.0.len()]);
        ends.nth(tokens - 1).map(|end| KeyToken(&self.0[..end]))
    }
}

/// Checks one token of a key, which starts at byte `offset` of the key
/// (error positions are the key's).
fn check_one(token: &str, offset: usize) -> Result<(), KeyError> {
    let bytes = token.as_bytes();
    if bytes.len() > MAX_TOKEN_LEN {
        return Err(KeyError::TooLong { len: bytes.len() });
    }
    if bytes == b"*" || bytes == b">" {
        return Err(KeyError::Wildcard(char::from(bytes[0])));
    }
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if is_unreserved(b) {
            i += 1;
            continue;
        }
        let at = offset + i;
        if b != b'%' {
            let ch = token[i..]
                .chars()
                .next()
                .unwrap_or(char::REPLACEMENT_CHARACTER);
            return Err(KeyError::Unencoded { ch, at });
        }
        let (Some(hi), Some(lo)) = (
            bytes.get(i + 1).copied().and_then(hex_value),
            bytes.get(i + 2).copied().and_then(hex_value),
        ) else {
            return Err(KeyError::BadEscape { at });
        };
        let byte = hi << 4 | lo;
        if is_unreserved(byte) {
            return Err(KeyError::NeedlessEscape { byte, at });
        }
        if bytes[i + 1].is_ascii_lowercase() || bytes[i + 2].is_ascii_lowercase() {
            return Err(KeyError::LowercaseHex { byte, at });
        }
        i += 3;
    }
    Ok(())
}

impl AsRef<str> for KeyToken<'_> {
    fn as_ref(&self) -> &str {
        self.0
    }
}

impl fmt::Display for KeyToken<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'A'..=b'F' => Some(b - b'A' + 10),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    }
}

/// Why a key token was refused. Every one is a 400 for the request; the
/// message says how to send the key instead.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("the key is empty; a key token is 1 to {MAX_TOKEN_LEN} bytes")]
    Empty,
    #[error("the key has an empty token at byte {at}; a grouped key is 2 or 3 non-empty tokens joined by '.' (org.key or org.team.key), and a '.' inside a key is encoded as %2E")]
    EmptyToken { at: usize },
    #[error("the key has {tokens} tokens; a grouped key has at most {MAX_TOKENS} (org.team.key), and a '.' inside a key is encoded as %2E (client libraries do this for you)")]
    TooManyTokens { tokens: usize },
    #[error("the key token is {len} bytes; the limit is {MAX_TOKEN_LEN} bytes after percent-encoding (each byte outside A-Z a-z 0-9 _ - takes 3)")]
    TooLong { len: usize },
    #[error("the key {0:?} is a NATS wildcard; percent-encode it as {enc} (client libraries do this for you)", enc = percent_encode_char(*.0))]
    Wildcard(char),
    #[error("the key contains {ch:?} at byte {at}; percent-encode it as {enc} (client libraries do this for you)", enc = percent_encode_char(*ch))]
    Unencoded { ch: char, at: usize },
    #[error("'%' at byte {at} of the key is not followed by two hex digits; a literal '%' is encoded as %25")]
    BadEscape { at: usize },
    #[error("the key has an escape in lower-case hex at byte {at}; write it as %{byte:02X}: a key has exactly one spelling, so that it always counts against the same limit")]
    LowercaseHex { byte: u8, at: usize },
    #[error("the key has %{byte:02X} at byte {at} for {ch:?}, which is sent as is; write {ch} instead: a key has exactly one spelling, so that it always counts against the same limit", ch = char::from(*byte))]
    NeedlessEscape { byte: u8, at: usize },
}

fn percent_encode_char(ch: char) -> String {
    let mut buf = [0u8; 4];
    encode_key(ch.encode_utf8(&mut buf).as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_messages_say_what_to_send() {
        assert_eq!(
            KeyToken::parse("bob@x").unwrap_err().to_string(),
            "the key contains '@' at byte 3; percent-encode it as %40 (client libraries do this for you)"
        );
        assert_eq!(
            KeyToken::parse("%2e").unwrap_err().to_string(),
            "the key has an escape in lower-case hex at byte 0; write it as %2E: a key has exactly one spelling, so that it always counts against the same limit"
        );
        assert_eq!(
            KeyToken::parse("%41").unwrap_err().to_string(),
            "the key has %41 at byte 0 for 'A', which is sent as is; write A instead: a key has exactly one spelling, so that it always counts against the same limit"
        );
        assert!(KeyToken::parse("ключ")
            .unwrap_err()
            .to_string()
            .contains("%D0%BA"));
        assert!(KeyToken::parse("*")
            .unwrap_err()
            .to_string()
            .contains("%2A"));
    }

    #[test]
    fn a_member_of_a_group_has_more_tokens_than_the_group() {
        assert_eq!(group_of("acme.alice"), Some("acme"));
        assert_eq!(group_of("acme.eng.alice"), Some("acme"));
        assert_eq!(group_of("acme"), None, "the group's own key");
        assert_eq!(group_of("acme%2Ealice"), None, "a '.' inside a key");
    }
}
