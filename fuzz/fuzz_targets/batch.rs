//! Batch bodies (`rl.p.<n>.batch`, `rl.w.<id>.batch`): the worker's
//! decoding of the items, and the client's of the results and of a single
//! reply. Any bytes give items, per-item errors or one error, never a
//! panic; decoded items encode and decode to the same items.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_core::wire::batch::{decode_items, decode_results, encode_items};
use sluice_core::wire::decode_reply;

fuzz_target!(|body: &[u8]| {
    if let Ok(items) = decode_items(body) {
        let ok: Vec<_> = items
            .iter()
            .filter_map(|i| i.as_ref().ok())
            .cloned()
            .collect();
        let again = encode_items(&ok);
        let back = decode_items(&again).expect("encoded items decode");
        assert_eq!(back.len(), ok.len());
    }
    let n = body.first().map_or(0, |b| usize::from(b % 8));
    let _ = decode_results(body, n);
    let _ = decode_reply(body);
});
