//! The `[envoy]` table (SPEC §11) and what the gateway does with it per
//! request: the bytes up to the first NUL are a config file's text (the
//! seeds in fuzz/seeds/envoy have `[[envoy.rules]]`), the rest a domain and
//! the descriptor's entries, one `key=value` a line. Loading never panics;
//! a loaded table picks at most one rule for the descriptor and renders
//! its key.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_core::config::{Config, EnvoyTarget};

fuzz_target!(|data: &[u8]| {
    let (table, request) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let (Ok(table), Ok(request)) = (std::str::from_utf8(table), std::str::from_utf8(request))
    else {
        return;
    };
    let Ok(config) = Config::from_toml(table, "fuzz.toml") else {
        return;
    };
    let Some(envoy) = &config.envoy else { return };
    let mut lines = request.lines();
    let domain = lines.next().unwrap_or("");
    let entries: Vec<(&str, &str)> = lines
        .map(|l| l.split_once('=').unwrap_or((l, "")))
        .collect();
    if let Some(rule) = envoy.rule_for(domain, &entries) {
        if let EnvoyTarget::Limit { key, .. } = &rule.target {
            let values: Vec<&str> = entries.iter().map(|(_, v)| *v).collect();
            let _ = key.as_ref().map(|k| k.render(&values));
        }
    }
});
