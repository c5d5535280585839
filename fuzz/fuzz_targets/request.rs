//! A request body on `rl.allow.<key>` / `rl.hit.<key>` (SPEC §1), and
//! the scope body of `rl.inspect` / `rl.reset` (§8): any bytes decode to a
//! request or an error reply, never a panic; a decoded request is one a
//! worker can act on (a valid policy name), and encoding it again and
//! decoding gives the same request.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_core::wire::inspect::decode_scope;
use sluice_core::wire::{decode_request, encode_request, is_valid_policy_name};

fuzz_target!(|body: &[u8]| {
    match decode_request(body) {
        Ok(r) => {
            assert!(is_valid_policy_name(&r.policy), "{:?}", r.policy);
            let again = encode_request(Some(&r.policy), Some(r.cost), r.encoding);
            let back = decode_request(&again).expect("an encoded request decodes");
            assert_eq!((back.policy, back.cost), (r.policy, r.cost));
        }
        Err(e) => {
            let _ = e.reply.encode(e.encoding);
        }
    }
    let _ = decode_scope(body);
});
