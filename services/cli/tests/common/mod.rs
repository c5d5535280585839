//! What several test files of sluice-cli share, one module per topic; what
//! every file shares (the stack, asks, load, configs) is in the
//! `sluice-tests` harness. Each test file is a crate of its own and uses a
//! part of this module, so items one file leaves unused are allowed here.
#![allow(dead_code)]

pub mod client;
pub mod gateway;
pub mod nats;

/// The binary under test.
pub const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");
