//! The inputs of the vectors: the keys, tokens and bodies a client gets
//! wrong most easily. Only inputs live here; what each one becomes is
//! computed by the code under test (`super`), never written by hand.

/// Keys (any bytes) a client encodes.
pub(super) fn keys() -> Vec<(&'static str, Vec<u8>)> {
    let mut cases: Vec<(&'static str, Vec<u8>)> = vec![
        ("plain", b"alice".to_vec()),
        ("unreserved bytes only", b"User_42-x".to_vec()),
        ("an email: '@' and '.'", b"bob@x.io".to_vec()),
        ("a colon", b"tenant:acme".to_vec()),
        ("dots, which would split the subject", b"a.b.c".to_vec()),
        ("a lone dot", b".".to_vec()),
        ("a space", b"a b".to_vec()),
        ("a tab and a newline", b"a\tb\n".to_vec()),
        (
            "a percent sign, encoded like any other byte",
            b"100%".to_vec(),
        ),
        ("text that looks encoded is encoded again", b"%41".to_vec()),
        ("lower-case hex text", b"%2e".to_vec()),
        ("UTF-8, two bytes a character", "ключ".as_bytes().to_vec()),
        ("UTF-8, three bytes a character", "日本".as_bytes().to_vec()),
        ("UTF-8, four bytes a character", "😀".as_bytes().to_vec()),
        ("the wildcard '*'", b"*".to_vec()),
        ("the wildcard '>'", b">".to_vec()),
        ("wildcards inside a key", b"a*b>c".to_vec()),
        ("base64 punctuation", b"ab+/cd==".to_vec()),
        ("bytes that are not UTF-8", vec![0xff, 0x00, 0x7f]),
        ("the empty key", Vec::new()),
    ];
    // The bound is on the encoded token: 256 bytes.
    cases.push(("256 bytes encoded: the longest token", vec![b'a'; 256]));
    cases.push(("257 bytes encoded: one too many", vec![b'a'; 257]));
    let mut escapes = vec![b'@'; 85];
    escapes.push(b'a');
    cases.push(("85 escapes and a letter: 256 bytes encoded", escapes));
    cases.push(("86 escapes: 258 bytes encoded", vec![b'@'; 86]));
    let mut across = vec![b'a'; 254];
    across.push(b'@');
    cases.push(("an escape across the bound: 257 bytes encoded", across));
    cases
}

/// Tokens as they arrive in a subject; a worker accepts only canonical ones.
pub(super) fn tokens() -> Vec<(&'static str, String)> {
    vec![
        ("plain", "alice".into()),
        ("canonical escapes", "bob%40x%2Eio".into()),
        ("canonical UTF-8", "%D0%BA%D0%BB%D1%8E%D1%87".into()),
        ("256 bytes", "a".repeat(256)),
        ("257 bytes", "a".repeat(257)),
        ("the wildcard '*'", "*".into()),
        ("the wildcard '>'", ">".into()),
        ("an unencoded byte", "bob@x".into()),
        ("an escape cut short", "%4".into()),
        ("an escape cut short at the end", "a%2".into()),
        ("an escape of no hex", "%zz".into()),
        ("lower-case hex: another spelling", "bob%40x%2eio".into()),
        ("a needless escape: another spelling", "%61lice".into()),
        ("a needless escape in lower case", "%6a".into()),
        ("four tokens: more than a grouped key has", "a.b.c.d".into()),
        ("an empty token of a grouped key", "acme..alice".into()),
    ]
}

/// Key paths (SPEC §17), outermost first.
pub(super) fn paths() -> Vec<(&'static str, Vec<&'static [u8]>)> {
    vec![
        ("an organisation and a key", vec![b"acme", b"alice"]),
        (
            "organisation, team and key",
            vec![b"acme", b"eng", b"alice"],
        ),
        (
            "each token encoded as a key alone",
            vec![b"acme corp", b"bob@x.io"],
        ),
        ("a '.' inside a token is encoded", vec![b"a.b", b"c"]),
        ("one token: a plain key", vec![b"acme"]),
        ("four tokens", vec![b"a", b"b", b"c", b"d"]),
        ("an empty token", vec![b"acme", b""]),
        ("no token", vec![]),
    ]
}

/// More tokens for the partition vectors: the table of docs/PROTOCOL.md §6.
pub(super) fn partition_tokens() -> [&'static str; 4] {
    ["bob", "carol", "user-42", "0123456789abcdef"]
}

/// Ask bodies.
pub(super) fn requests() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("empty: policy default, cost 1", Vec::new()),
        ("an empty JSON object", b"{}".to_vec()),
        (
            "JSON policy and cost",
            br#"{"policy":"login","cost":3}"#.to_vec(),
        ),
        (
            "MessagePack policy and cost",
            // {"policy":"login","cost":3}, docs/PROTOCOL.md §2
            b"\x82\xa6policy\xa5login\xa4cost\x03".to_vec(),
        ),
        (
            "MessagePack cost as a uint64",
            b"\x81\xa4cost\xcf\0\0\0\0\0\0\0\x07".to_vec(),
        ),
        ("a peek: cost 0", br#"{"cost":0}"#.to_vec()),
        ("an id", br#"{"id":"order-7"}"#.to_vec()),
        (
            "null counts as not given",
            br#"{"policy":null,"cost":null}"#.to_vec(),
        ),
        (
            "MessagePack nil counts as not given",
            b"\x81\xa6policy\xc0".to_vec(),
        ),
        ("the largest cost", br#"{"cost":1000000000}"#.to_vec()),
        ("an unknown field", br#"{"cots":5}"#.to_vec()),
        ("a cost as a string", br#"{"cost":"5"}"#.to_vec()),
        ("a negative cost", br#"{"cost":-1}"#.to_vec()),
        ("a fractional cost", br#"{"cost":1.5}"#.to_vec()),
        ("a cost over the bound", br#"{"cost":1000000001}"#.to_vec()),
        ("a policy name with a dot", br#"{"policy":"a.b"}"#.to_vec()),
        ("a field twice", br#"{"cost":1,"cost":2}"#.to_vec()),
        ("bytes after the object", br#"{"cost":1}x"#.to_vec()),
        ("a JSON array", b"[1,2]".to_vec()),
        ("text", b"hello".to_vec()),
        ("JSON after a space is read as MessagePack", b" {}".to_vec()),
        ("a MessagePack array", b"\x92\x01\x02".to_vec()),
        ("MessagePack cut short", b"\x82\xa6policy\xa5log".to_vec()),
        (
            "an id over 128 bytes",
            format!(r#"{{"id":"{}"}}"#, "i".repeat(129)).into_bytes(),
        ),
        (
            "an id with a control character",
            br#"{"id":"a\u0007b"}"#.to_vec(),
        ),
        ("4097 bytes: over the bound", too_large()),
    ]
}

/// A JSON body of 4097 bytes, one over the bound (`wire::MAX_BODY`).
pub(super) fn too_large() -> Vec<u8> {
    let mut body = br#"{"policy":""#.to_vec();
    body.resize(4095, b'a');
    body.extend_from_slice(br#""}"#);
    body
}
