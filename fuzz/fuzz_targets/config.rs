//! The config file (SPEC §4): any text is a config or a `ConfigError`
//! naming what is wrong, never a panic. A config that loads has a default
//! policy, and every policy it has can be turned into its table and back.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_core::config::{Config, PolicyTable};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(config) = Config::from_toml(text, "fuzz.toml") else {
        return;
    };
    let _ = config.default_policy();
    for (name, policy) in &config.policies {
        let table = PolicyTable::of(policy);
        table
            .to_policy(name)
            .expect("a loaded policy's table is valid");
    }
});
