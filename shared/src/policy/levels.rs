//! What a policy is and does as a level of a group (SPEC §17): its
//! parent, the level above it, and the check that tells whether an ask
//! fits without taking anything.
//!
//! Apart from [`super`] because groups have their own rules: what a level
//! may not have yet, since a group is decided by one owner in one turn
//! ([`crate::group`] resolves and checks the chains), and the two steps
//! of an all-or-nothing decision over several keys (every level checked,
//! then every level taken).

use super::run::Run;
use super::{KeyState, Policy, PolicyError};
use crate::limit::Decision;
use crate::time::Nanos;
use std::sync::Arc;

impl Policy {
    /// The same policy with `parent` as the level above it (`None`: a
    /// policy of one level). Whether the parent exists, and whether the
    /// chain it starts is short enough and has no loop, depends on the
    /// other policies: [`crate::group::check_chains`] says.
    pub fn with_parent(mut self, parent: Option<&str>) -> Result<Policy, PolicyError> {
        if parent == Some(self.name()) {
            return Err(PolicyError::OwnParent);
        }
        self.parent = parent.map(Arc::from);
        self.parent_not_yet()?;
        Ok(self)
    }

    /// The policy of the level above, if it has one.
    pub fn parent(&self) -> Option<&str> {
        self.parent.as_deref()
    }

    /// What a policy with a parent cannot have yet, whichever was set
    /// first: a global scope, local budgets.
    pub(super) fn parent_not_yet(&self) -> Result<(), PolicyError> {
        if self.parent.is_none() {
            return Ok(());
        }
        if self.scope.global().is_some() {
            return Err(PolicyError::ParentNotYet("scope = \"global\""));
        }
        if self.local_budget {
            return Err(PolicyError::ParentNotYet("local_budget = true"));
        }
        Ok(())
    }

    /// What [`Policy::decide_within`] would answer at `now` for an ask of
    /// `cost` that may start up to `within` from now, in this policy's
    /// mode, taking nothing and starting no block: a blocked key's
    /// denial, or whether the ask fits (its `wait` when it fits later, its
    /// `retry_after` when it does not fit within `within`).
    pub fn check_within(
        &self,
        state: &mut KeyState,
        now: Nanos,
        cost: u64,
        within: Nanos,
    ) -> Decision {
        let decision = match self.blocked_until(state, now) {
            Some(until) => {
                let peek = self.run(
                    state,
                    now,
                    0,
                    Run::Allow {
                        within: Nanos::ZERO,
                    },
                );
                crate::penalty::denial(peek, until, now)
            }
            None => self.run(state, now, cost, Run::Check { within }),
        };
        self.mode.answer(decision)
    }
}
