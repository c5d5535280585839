//! Keys as subject tokens: one spelling per key, round trips, and every
//! refusal named.

use proptest::prelude::*;
use sluice_core::key::{
    decode_key, encode_key, encoded_len, try_encode_key, try_encode_path, KeyError, KeyToken,
    MAX_TOKEN_LEN,
};

fn parse(token: &str) -> Result<KeyToken<'_>, KeyError> {
    KeyToken::parse(token)
}

#[test]
fn an_email_is_encoded_as_in_the_contract() {
    assert_eq!(encode_key(b"bob@x.io"), "bob%40x%2Eio");
    assert_eq!(decode_key("bob%40x%2Eio").unwrap(), b"bob@x.io");
}

#[test]
fn unreserved_bytes_are_sent_as_they_are() {
    let all = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-";
    assert_eq!(encode_key(all).as_bytes(), all);
    assert_eq!(
        parse(std::str::from_utf8(all).unwrap())
            .unwrap()
            .as_str()
            .as_bytes(),
        all
    );
}

#[test]
fn percent_and_utf8_are_encoded_byte_by_byte() {
    assert_eq!(encode_key(b"100%"), "100%25");
    assert_eq!(encode_key("ключ".as_bytes()), "%D0%BA%D0%BB%D1%8E%D1%87");
    assert_eq!(encode_key(b"tenant:acme"), "tenant%3Aacme");
    assert_eq!(encode_key(&[0x00, 0xff]), "%00%FF");
}

#[test]
fn an_empty_key_is_refused() {
    assert_eq!(parse(""), Err(KeyError::Empty));
    assert_eq!(try_encode_key(b""), Err(KeyError::Empty));
}

#[test]
fn wildcards_are_refused() {
    assert_eq!(parse("*"), Err(KeyError::Wildcard('*')));
    assert_eq!(parse(">"), Err(KeyError::Wildcard('>')));
    assert_eq!(encode_key(b"*"), "%2A");
    assert_eq!(encode_key(b">"), "%3E");
}

#[test]
fn a_wildcard_inside_a_token_is_an_unencoded_byte() {
    assert_eq!(parse("a*"), Err(KeyError::Unencoded { ch: '*', at: 1 }));
}

#[test]
fn a_token_of_257_bytes_is_too_long_and_256_is_fine() {
    let ok = "a".repeat(MAX_TOKEN_LEN);
    let long = "a".repeat(MAX_TOKEN_LEN + 1);
    assert!(parse(&ok).is_ok());
    assert_eq!(parse(&long), Err(KeyError::TooLong { len: 257 }));
}

#[test]
fn the_limit_counts_encoded_bytes() {
    // 86 '@' encode to 258 bytes.
    let key = vec![b'@'; 86];
    assert_eq!(try_encode_key(&key), Err(KeyError::TooLong { len: 258 }));
    assert!(try_encode_key(&key[..85]).is_ok());
}

#[test]
fn a_truncated_escape_is_refused() {
    assert_eq!(parse("%4"), Err(KeyError::BadEscape { at: 0 }));
    assert_eq!(parse("ab%"), Err(KeyError::BadEscape { at: 2 }));
}

#[test]
fn an_escape_without_hex_digits_is_refused() {
    assert_eq!(parse("%zz"), Err(KeyError::BadEscape { at: 0 }));
    assert_eq!(parse("x%4g"), Err(KeyError::BadEscape { at: 1 }));
}

#[test]
fn an_escape_of_a_byte_that_needs_none_is_refused() {
    assert_eq!(
        parse("%41"),
        Err(KeyError::NeedlessEscape { byte: b'A', at: 0 })
    );
    // Even in lower case: the fix is to send the byte itself.
    assert_eq!(
        parse("%6a"),
        Err(KeyError::NeedlessEscape { byte: b'j', at: 0 })
    );
}

#[test]
fn lower_case_hex_is_refused() {
    assert_eq!(
        parse("%2e"),
        Err(KeyError::LowercaseHex { byte: b'.', at: 0 })
    );
    assert_eq!(
        parse("bob%40x%2eio"),
        Err(KeyError::LowercaseHex { byte: b'.', at: 7 })
    );
}

#[test]
fn an_unencoded_byte_is_refused_with_its_encoding() {
    let err = parse("bob@x").unwrap_err();
    assert_eq!(err, KeyError::Unencoded { ch: '@', at: 3 });
    assert!(err.to_string().contains("%40"), "{err}");
    assert_eq!(parse("a;b"), Err(KeyError::Unencoded { ch: ';', at: 1 }));
    assert_eq!(parse("a b"), Err(KeyError::Unencoded { ch: ' ', at: 1 }));
    assert_eq!(parse("é"), Err(KeyError::Unencoded { ch: 'é', at: 0 }));
}

#[test]
fn a_grouped_key_is_up_to_three_tokens_each_spelled_once() {
    let key = parse("acme.eng.alice%40x").unwrap();
    assert_eq!(key.tokens(), 3);
    assert!(key.is_grouped());
    assert_eq!(key.level(1).unwrap().as_str(), "acme");
    assert_eq!(key.level(2).unwrap().as_str(), "acme.eng");
    assert_eq!(key.level(3).unwrap().as_str(), "acme.eng.alice%40x");
    assert_eq!(key.level(4), None);
    assert_eq!(key.level(0), None);
    assert_eq!(key.decode(), b"acme/eng/alice@x");
    assert_eq!(key.partition(16), parse("acme").unwrap().partition(16));
    assert!(!parse("alice").unwrap().is_grouped());

    assert_eq!(parse("a.b.c.d"), Err(KeyError::TooManyTokens { tokens: 4 }));
    assert_eq!(parse("acme..alice"), Err(KeyError::EmptyToken { at: 5 }));
    assert_eq!(parse("acme."), Err(KeyError::EmptyToken { at: 5 }));
    assert_eq!(parse(".acme"), Err(KeyError::EmptyToken { at: 0 }));
    assert_eq!(parse("acme.*"), Err(KeyError::Wildcard('*')));
    assert_eq!(
        parse("acme.bob%2e"),
        Err(KeyError::LowercaseHex { byte: b'.', at: 8 })
    );
    assert_eq!(
        try_encode_path(&[b"acme", b"eng", b"bob@x.io"]).unwrap(),
        "acme.eng.bob%40x%2Eio"
    );
    assert_eq!(
        try_encode_path(&[b"acme", b""]),
        Err(KeyError::EmptyToken { at: 5 })
    );
    assert!(try_encode_path(&[b"a", b"b", b"c", b"d"]).is_err());
    assert_eq!(try_encode_path(&[]), Err(KeyError::Empty));
}

#[test]
fn error_messages_are_one_line() {
    for token in [
        "",
        "*",
        "a\nb",
        "%4",
        "%zz",
        "%41",
        "%2e",
        "bob@x",
        &"a".repeat(300),
    ] {
        let msg = parse(token).unwrap_err().to_string();
        assert!(!msg.contains(['\n', '\r']), "{msg:?}");
    }
}

#[test]
fn a_token_partitions_like_the_server() {
    assert_eq!(parse("alice").unwrap().partition(16), 7);
}

/// Spellings of `key` that decode to the same bytes but are not canonical:
/// for each byte, maybe escape it needlessly, maybe lower-case an escape.
fn spelling(key: &[u8], choices: &[(bool, bool)]) -> String {
    let mut out = String::new();
    for (&b, &(escape, lower)) in key.iter().zip(choices) {
        let canonical = encode_key(&[b]);
        let s = if canonical.len() == 1 && !escape {
            canonical
        } else {
            format!("%{b:02X}")
        };
        // Lower-casing only changes the spelling of an escape, never a byte sent as is.
        let lower = lower && s.starts_with('%');
        out.push_str(&if lower { s.to_ascii_lowercase() } else { s });
    }
    out
}

proptest! {
    #[test]
    fn every_key_round_trips(key in proptest::collection::vec(any::<u8>(), 0..300)) {
        let token = encode_key(&key);
        prop_assert_eq!(token.len(), encoded_len(&key));
        let accepted = !key.is_empty() && token.len() <= MAX_TOKEN_LEN;
        match parse(&token) {
            Ok(t) => {
                prop_assert!(accepted, "accepted {token:?}");
                prop_assert_eq!(t.as_str(), token.as_str());
                prop_assert_eq!(t.decode(), key.clone());
            }
            Err(e) => prop_assert!(!accepted, "refused {token:?}: {e}"),
        }
        prop_assert_eq!(try_encode_key(&key).is_ok(), accepted);
    }

    #[test]
    fn an_encoded_key_is_one_nats_token(key in proptest::collection::vec(any::<u8>(), 1..300)) {
        let token = encode_key(&key);
        prop_assert!(!token.is_empty());
        prop_assert!(token != "*" && token != ">");
        prop_assert!(token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'%'));
        prop_assert!(!token.contains(['.', '*', '>']));
        prop_assert!(!token.chars().any(char::is_whitespace));
    }

    #[test]
    fn every_other_spelling_of_a_key_is_refused(
        (key, choices) in proptest::collection::vec(any::<u8>(), 1..100).prop_flat_map(|key| {
            let n = key.len();
            (Just(key), proptest::collection::vec((any::<bool>(), any::<bool>()), n))
        })
    ) {
        let canonical = encode_key(&key);
        let other = spelling(&key, &choices);
        prop_assume!(other != canonical);
        let err = parse(&other);
        prop_assert!(err.is_err(), "accepted {other:?} for canonical {canonical:?}");
        if other.len() <= MAX_TOKEN_LEN {
            let is_canonicity_error = matches!(
                err,
                Err(KeyError::LowercaseHex { .. } | KeyError::NeedlessEscape { .. })
            );
            prop_assert!(is_canonicity_error, "{err:?}");
        }
    }

    /// Whatever string comes in on a subject: if it parses, it is the
    /// encoding of what it decodes to (one spelling per key).
    #[test]
    fn a_token_that_parses_is_canonical(token in "([A-Za-z0-9_.@*> -]|%[0-9A-Fa-f]{0,2}){0,40}") {
        if let Ok(t) = parse(&token) {
            // A grouped key: each of its tokens is its own one spelling.
            let again: Vec<String> = t
                .as_str()
                .split('.')
                .map(|one| encode_key(&parse(one).unwrap().decode()))
                .collect();
            prop_assert_eq!(again.join("."), token);
        }
    }
}
