//! What every verb of the client takes as a key: [`AsKey`].
//!
//! A plain key is any bytes (`&str`, `String`, `&[u8]`, `Vec<u8>`): the
//! client percent-encodes it into one token, as before. A grouped key
//! (SPEC §17; docs/GROUPS.md) is a [`KeyPath`]: its tokens' bytes,
//! outermost first (`["acme", "eng", "alice"]`), each encoded and joined
//! by `.`, so that the worker decides every level of its policy's chain
//! in one turn. Both go wherever a key goes (asks, peeks, hits, holds,
//! waits, inspect, reset, usage): one trait instead of a `_path` twin of
//! every method.
//!
//! A `.` or `/` inside a plain key's bytes stays part of that key
//! (encoded as `%2E`, `%2F`): only a [`KeyPath`] makes tokens, so no key
//! becomes grouped by accident.

use crate::error::Error;
use sluice_core::key::{self, KeyError, KeyToken};
use std::fmt;

/// A key as every verb of [`crate::Client`] takes it: plain bytes (one
/// token) or a [`KeyPath`] (one to three tokens).
pub trait AsKey {
    /// The key token as sent on the wire (`bob%40x%2Eio`,
    /// `acme.eng.alice`), or why no worker would take it.
    fn key_token(&self) -> Result<String, KeyError>;
}

impl<T: AsRef<[u8]> + ?Sized> AsKey for T {
    fn key_token(&self) -> Result<String, KeyError> {
        key::try_encode_key(self.as_ref())
    }
}

/// A key given as its path of one to three tokens, outermost first: the
/// organisation, the team, the user (SPEC §17). One token is a plain key.
///
/// ```
/// use sluice_client::KeyPath;
/// let alice = KeyPath::new(["acme", "eng", "alice"]).unwrap();
/// assert_eq!(alice.token(), "acme.eng.alice");
/// assert_eq!(alice.to_string(), "acme/eng/alice");
/// let dotted = KeyPath::new(["acme", "bob@x.io"]).unwrap();
/// assert_eq!(dotted.token(), "acme.bob%40x%2Eio");
/// assert!(KeyPath::new(["a", "b", "c", "d"]).is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct KeyPath {
    token: String,
}

impl KeyPath {
    /// The key of `tokens`, outermost first: each token's bytes are
    /// percent-encoded as a key's are. Refuses no token, more than three,
    /// an empty token and a token too long, with the reason (400).
    pub fn new<I>(tokens: I) -> Result<KeyPath, Error>
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
    {
        let tokens: Vec<I::Item> = tokens.into_iter().collect();
        let bytes: Vec<&[u8]> = tokens.iter().map(AsRef::as_ref).collect();
        key::try_encode_path(&bytes)
            .map(|token| KeyPath { token })
            .map_err(|e| Error::BadRequest(e.to_string()))
    }

    /// The key as people write it, tokens split at `/`
    /// ([`key::SHOWN_SEPARATOR`]): `acme/eng/alice`. Each token is taken
    /// as it is written (a `/` cannot be inside one; give such a key to
    /// [`KeyPath::new`] as bytes).
    pub fn from_shown(shown: &str) -> Result<KeyPath, Error> {
        KeyPath::new(shown.split(key::SHOWN_SEPARATOR))
    }

    /// The key of a key token as sent (`acme.eng.alice`, `bob%40x%2Eio`):
    /// what an override entry or a usage reply holds. Refuses a token
    /// that is not one canonical spelling (400).
    pub fn from_token(token: &str) -> Result<KeyPath, Error> {
        KeyToken::parse(token)
            .map(|t| KeyPath::of_token(t.as_str().to_string()))
            .map_err(|e| Error::BadRequest(e.to_string()))
    }

    /// The path of a token already encoded (by [`token_of`]).
    pub(crate) fn of_token(token: String) -> KeyPath {
        KeyPath { token }
    }

    /// The key token as sent: the tokens encoded, joined by `.`.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// How many tokens it has: 1 (a plain key) to 3.
    pub fn tokens(&self) -> usize {
        self.key().tokens()
    }

    /// Whether it has more than one token (SPEC §17).
    pub fn is_grouped(&self) -> bool {
        self.key().is_grouped()
    }

    fn key(&self) -> KeyToken<'_> {
        KeyToken::parse(&self.token).expect("built by try_encode_path")
    }
}

/// The tokens as people read them, joined by `/`, each shown as
/// [`key::shown_key`] shows a key.
impl fmt::Display for KeyPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown: Vec<String> = self.token.split('.').map(key::shown_key).collect();
        f.write_str(&shown.join("/"))
    }
}

impl AsKey for KeyPath {
    fn key_token(&self) -> Result<String, KeyError> {
        Ok(self.token.clone())
    }
}

impl AsKey for &KeyPath {
    fn key_token(&self) -> Result<String, KeyError> {
        Ok(self.token.clone())
    }
}

/// The token of `key`, refused as a 400 with the reason.
pub(crate) fn token_of(key: &(impl AsKey + ?Sized)) -> Result<String, Error> {
    key.key_token()
        .map_err(|e| Error::BadRequest(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_key_is_one_token_whatever_its_bytes() {
        assert_eq!("acme/alice".key_token().unwrap(), "acme%2Falice");
        assert_eq!("a.b".key_token().unwrap(), "a%2Eb");
        assert_eq!(b"".key_token(), Err(KeyError::Empty));
    }

    #[test]
    fn a_path_joins_its_encoded_tokens() {
        let p = KeyPath::new(["acme", "eng", "alice"]).unwrap();
        assert_eq!(
            (p.token(), p.tokens(), p.is_grouped()),
            ("acme.eng.alice", 3, true)
        );
        assert_eq!(p.key_token().unwrap(), "acme.eng.alice");
        assert_eq!(AsKey::key_token(&&p).unwrap(), "acme.eng.alice");
        let one = KeyPath::new([b"bob@x.io".as_slice()]).unwrap();
        assert_eq!((one.token(), one.is_grouped()), ("bob%40x%2Eio", false));
        assert_eq!(
            KeyPath::from_shown("acme/a.b").unwrap().token(),
            "acme.a%2Eb"
        );
        assert_eq!(
            KeyPath::from_shown("acme/a.b").unwrap().to_string(),
            "acme/a.b"
        );
    }

    #[test]
    fn a_bad_path_is_a_400_with_the_reason() {
        for bad in ["a/b/c/d", "acme//alice", "/alice", ""] {
            let e = KeyPath::from_shown(bad).unwrap_err();
            assert_eq!(e.status(), 400, "{bad}: {e}");
        }
        let e = KeyPath::from_shown("a/b/c/d").unwrap_err();
        assert!(e.message().contains("at most 3"), "{e}");
        assert!(KeyPath::new(Vec::<&str>::new()).is_err());
    }
}
