//! TEMP stub until the config module lands.
use crate::policy::Policy;
use std::collections::BTreeMap;
use std::time::Duration;
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability { Snapshot, Journal }
#[derive(Clone, Debug)]
pub struct Config { pub partitions: u32, pub durability: Durability, pub snapshot_interval: Duration, pub lease_ttl: Duration, pub policies: BTreeMap<String, Policy> }
impl Config { pub fn policy(&self, name: &str) -> Option<&Policy> { self.policies.get(name) } }
