//! The batching client target (`--client batching`): `sluice-client` with
//! batching on. Not available until the client crate lands on main.

use super::report::Outcome;
use super::targets::TargetSpec;
use anyhow::{bail, Result};

#[derive(Clone, Debug)]
#[allow(dead_code)] // read once the batching client is there
pub struct BatchingSpec {
    pub partitions: u32,
    pub deny_cache: bool,
}

pub struct BatchingTarget;

pub async fn connect(
    _spec: &BatchingSpec,
    _target: &TargetSpec,
    _index: usize,
) -> Result<BatchingTarget> {
    bail!("--client batching needs sluice-client's batching, which this build does not have yet")
}

impl BatchingTarget {
    pub async fn ask(&self, _key: usize) -> (Outcome, Option<String>) {
        (Outcome::Other, Some("no batching client".into()))
    }

    pub fn stats(&self) -> serde_json::Value {
        serde_json::Value::Null
    }
}
