//! The `sluice` binary's integration tests, one module per topic, in one
//! test binary: one link instead of one per file (36 of them took a
//! minute of CI's build), and one [`sluice_tests::serial`] lock, so tests
//! that measure still run one at a time as they did per file.
//!
//! Run one topic with `cargo test -p sluice-cli --test cli -- regions_global::`
//! (docs/TESTING.md).

mod common;

mod alerts;
mod auth;
mod bench;
mod budgets;
mod client;
mod client_failover;
mod client_groups;
mod client_round_trips;
mod cluster_start;
mod commands;
mod conformance;
mod dev;
mod formats;
mod gateway;
mod gateway_groups;
mod gateway_proxy;
mod gateway_proxy_slots;
mod gateway_reload;
mod gateway_security;
mod gateway_ui;
mod group_holds;
mod groups;
mod holds;
mod holds_batched;
mod keys;
mod linearizable;
mod linearizable_groups;
mod metrics;
mod nats_freeze_experiments;
mod nemesis;
mod pacing;
mod policies;
mod quotas;
mod regions;
mod regions_alerts;
mod regions_bucket;
mod regions_global;
mod regions_security;
mod regions_sliding;
mod traces;
mod usage;
mod workers;
