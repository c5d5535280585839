//! The policies in force, replaced whole when the `sluice-policies` bucket
//! changes ([`crate::policy_watch`]), with the decision counters of every
//! policy ever in force.
//!
//! A batch takes the policies once ([`LivePolicies::policies`]) and decides
//! with that version, so a change never lands in the middle of a batch. The
//! meters are replaced before the policies: a batch that takes the new
//! policies then finds their names in the meters its turn's log takes.

use crate::stats::WorkerStats;
use crate::turn_log::PolicyMeters;
use sluice_core::config::Config;
use sluice_core::policies::Policies;
use sluice_core::policy::Policy;
use std::sync::{Arc, RwLock};

/// The policies in force and their meters.
pub struct LivePolicies {
    policies: RwLock<Arc<Policies>>,
    /// The decision counters of every policy ever in force.
    meters: RwLock<Arc<PolicyMeters>>,
    stats: Arc<WorkerStats>,
}

impl LivePolicies {
    /// The policies of `config`, in force until the bucket says otherwise.
    pub fn new(config: &Config, stats: Arc<WorkerStats>) -> LivePolicies {
        let policies = Policies::from_config(config);
        let meters = PolicyMeters::default().with(&stats, policies.iter().map(Policy::name));
        LivePolicies {
            policies: RwLock::new(Arc::new(policies)),
            meters: RwLock::new(Arc::new(meters)),
            stats,
        }
    }

    /// The policies in force now.
    pub fn policies(&self) -> Arc<Policies> {
        self.policies
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Puts `policies` in force for the next batches.
    pub fn set(&self, policies: Policies) {
        let meters = self
            .meters()
            .with(&self.stats, policies.iter().map(Policy::name));
        *self.meters.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(meters);
        *self.policies.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(policies);
    }

    /// The meters of every policy ever in force.
    pub fn meters(&self) -> Arc<PolicyMeters> {
        self.meters
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}
