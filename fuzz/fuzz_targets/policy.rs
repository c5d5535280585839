//! The policy bucket's values (SPEC §7): a policy table's JSON
//! ([`PolicyTable::from_json`]) and a per-key override body, as written by
//! `sluice policy set` or by anyone with the `admin` role. Any bytes give a
//! policy or an error that names the field, never a panic, whether applied
//! as a policy or as an override of the default policy.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_core::config::{Config, PolicyTable};
use sluice_core::policies::Policies;

fuzz_target!(|json: &[u8]| {
    if let Ok(table) = PolicyTable::from_json(json) {
        if let Ok(policy) = table.to_policy("fuzz") {
            let again = PolicyTable::of(&policy);
            again
                .to_policy("fuzz")
                .expect("a policy's own table is valid");
        }
    }
    let mut policies = Policies::from_config(&Config::default());
    let _ = policies.apply("fuzz", Some(json));
    let _ = policies.apply("override.default.alice", Some(json));
    let _ = policies.override_of("default", "alice");
});
