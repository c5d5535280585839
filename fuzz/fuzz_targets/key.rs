//! Key tokens: the last token of `rl.<verb>.<token>` is parsed by every
//! worker ([`KeyToken::parse`]), and any key bytes are encoded by every
//! client. Parsing any text never panics and accepts only what the encoder
//! makes; encoding any bytes gives a token that parses and decodes back to
//! the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_core::key::{decode_key, encode_key, try_encode_key, KeyToken};

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(token) = KeyToken::parse(text) {
            let key = token.decode();
            assert_eq!(
                encode_key(&key),
                text,
                "a parsed token is the encoding of its key"
            );
            let _ = token.partition(64);
        }
        let _ = decode_key(text);
    }
    if let Ok(token) = try_encode_key(data) {
        let parsed = KeyToken::parse(&token).expect("an encoded key parses");
        assert_eq!(parsed.decode(), data);
    }
});
