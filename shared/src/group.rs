//! Groups (SPEC §17): organisation > team > key limits in one decision.
//!
//! A user within their own limit can still be stopped by their
//! organisation's pool, and two asks (the user's, then the org's) are not
//! one decision: the first is spent when the second denies. So a policy
//! may name a `parent`, and an ask of a grouped key (`acme.eng.alice`,
//! [`crate::key`]) under it is decided at every level of its chain, each on
//! its own key: `user` on `acme.eng.alice`, its parent `team` on
//! `acme.eng`, that one's parent `org` on `acme`. All or nothing: every
//! level is checked first, taking nothing ([`crate::policy::Policy::check_within`]),
//! and only when every level admits the ask is it taken at each.
//!
//! Every key of a group lives in its first token's partition, so one
//! owner decides all the levels in one turn; this module is the pure part
//! of it: the chain of an ask ([`resolve`]), the checks of a config's
//! chains wherever policies are read ([`check_chains`]), and the one
//! answer the levels' decisions sum up to ([`combine`]).

use crate::key::{KeyToken, MAX_TOKENS};
use crate::policy::{Decision, Policy};
use crate::time::Nanos;
use crate::wire::ErrorReply;

/// The most levels a chain has: as many as a grouped key has tokens.
pub const MAX_LEVELS: usize = MAX_TOKENS;

/// One level of an ask: the policy deciding it and the key it decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Level<'p, 'k> {
    pub policy: &'p Policy,
    pub key: KeyToken<'k>,
}

/// An ask's levels, outermost first: the ask's own policy on the whole
/// key is the last.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chain<'p, 'k> {
    levels: [Option<Level<'p, 'k>>; MAX_LEVELS],
    len: usize,
}

impl<'p, 'k> Chain<'p, 'k> {
    /// Its levels, outermost first.
    pub fn levels(&self) -> impl ExactSizeIterator<Item = Level<'p, 'k>> + '_ {
        self.levels[..self.len]
            .iter()
            .map(|l| l.expect("set up to len"))
    }

    /// How many levels it has (1: a plain ask).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has more than one level (never empty).
    pub fn is_grouped(&self) -> bool {
        self.len > 1
    }

    /// Never: a chain has its ask's own level at least.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The group's token: the first token of its keys, which every level
    /// shares (and its partition is hashed from).
    pub fn group(&self) -> &'k str {
        let outermost = self.level(0).expect("a chain has a level").key;
        outermost.level(1).expect("a key has a token").as_str()
    }

    /// The level at `index`, outermost first.
    pub fn level(&self, index: usize) -> Option<Level<'p, 'k>> {
        self.levels.get(index).copied().flatten()
    }
}

/// Why an ask's chain, or a config's, cannot be decided. A 400 for the
/// ask ([`ChainError::reply`]); a refused policy in a config or bucket.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChainError {
    #[error("policy {policy:?} names parent {parent:?}, which is not configured; add [policies.{parent}] or remove parent")]
    MissingParent { policy: String, parent: String },
    #[error("the parents of policy {policy:?} loop ({path}); a chain of parents must end at a policy without one")]
    Loop { policy: String, path: String },
    #[error("policy {policy:?} has more than {MAX_LEVELS} levels ({path} > ...); a group has at most {MAX_LEVELS} (key > team > org)")]
    TooLong { policy: String, path: String },
    #[error("policy {policy:?} decides {levels} levels ({path}), but key {key:?} has {tokens} token(s); send one token per level, outermost first (rl.allow.<org>.<key> or rl.allow.<org>.<team>.<key>)")]
    FewerTokens {
        policy: String,
        path: String,
        levels: usize,
        key: String,
        tokens: usize,
    },
    #[error("policy {level:?} is a level of {policy:?} ({path}) and cannot have {what} in this version: the levels of a group are decided by one owner in one turn (SPEC §17)")]
    LevelNotYet {
        policy: String,
        path: String,
        level: String,
        what: &'static str,
    },
    #[error("key {key:?} is grouped and policy {policy:?} has {what}, which grouped keys cannot have in this version (SPEC §17); ask it with a key of one token, or under another policy")]
    GroupedNotYet {
        policy: String,
        key: String,
        what: &'static str,
    },
}

impl ChainError {
    /// The 400 that refuses an ask with this chain.
    pub fn reply(&self) -> ErrorReply {
        ErrorReply::bad_request(self.to_string())
    }
}

/// The chain of policies above `policy`, outermost first, `policy` last,
/// checked: every parent configured, no loop, at most [`MAX_LEVELS`], no
/// level with what a level cannot have yet ([`level_not_yet`]).
fn walk<'p>(
    policy_of: impl Fn(&str) -> Option<&'p Policy>,
    policy: &'p Policy,
) -> Result<([Option<&'p Policy>; MAX_LEVELS], usize), ChainError> {
    let mut up: [Option<&'p Policy>; MAX_LEVELS] = [None; MAX_LEVELS];
    up[0] = Some(policy);
    let mut len = 1;
    let mut at = policy;
    while let Some(parent) = at.parent() {
        let names = || {
            up[..len]
                .iter()
                .flatten()
                .map(|p| p.name())
                .collect::<Vec<_>>()
        };
        if up[..len].iter().flatten().any(|p| p.name() == parent) {
            return Err(ChainError::Loop {
                policy: policy.name().to_string(),
                path: path_of(&names(), Some(parent)),
            });
        }
        let Some(next) = policy_of(parent) else {
            return Err(ChainError::MissingParent {
                policy: at.name().to_string(),
                parent: parent.to_string(),
            });
        };
        if len == MAX_LEVELS {
            return Err(ChainError::TooLong {
                policy: policy.name().to_string(),
                path: path_of(&names(), Some(parent)),
            });
        }
        up[len] = Some(next);
        len += 1;
        at = next;
    }
    if len > 1 {
        for level in up[..len].iter().flatten() {
            if let Some(what) = level_not_yet(level) {
                let names: Vec<&str> = up[..len].iter().flatten().map(|p| p.name()).collect();
                return Err(ChainError::LevelNotYet {
                    policy: policy.name().to_string(),
                    path: path_of(&names, None),
                    level: level.name().to_string(),
                    what,
                });
            }
        }
    }
    up[..len].reverse();
    Ok((up, len))
}

/// What a level of a group (a policy in a chain of two or more) cannot
/// have in this version: a global scope, local budgets.
fn level_not_yet(policy: &Policy) -> Option<&'static str> {
    if policy.scope().global().is_some() {
        return Some("scope = \"global\"");
    }
    if policy.local_budget() {
        return Some("local_budget = true");
    }
    None
}

/// `user > team > org`, innermost first, as a reader follows `parent`.
fn path_of(names: &[&str], then: Option<&str>) -> String {
    let mut path: Vec<&str> = names.to_vec();
    path.extend(then);
    path.join(" > ")
}

/// The levels of an ask of `key` under `policy`, outermost first: the
/// policy's chain of parents, each on the key cut to its place (the ask's
/// own policy on the whole key, its parent on the key one token shorter).
/// A key of more tokens than levels is decided at its own level on the
/// whole key and at each parent on a shorter one; one of fewer is refused,
/// as is a grouped key under a policy that cannot decide one yet.
pub fn resolve<'p, 'k>(
    policy_of: impl Fn(&str) -> Option<&'p Policy>,
    policy: &'p Policy,
    key: KeyToken<'k>,
) -> Result<Chain<'p, 'k>, ChainError> {
    let tokens = key.tokens();
    if tokens > 1 {
        if let Some(what) = level_not_yet(policy) {
            return Err(ChainError::GroupedNotYet {
                policy: policy.name().to_string(),
                key: key.to_string(),
                what,
            });
        }
    }
    if policy.parent().is_none() {
        let mut levels = [None; MAX_LEVELS];
        levels[0] = Some(Level { policy, key });
        return Ok(Chain { levels, len: 1 });
    }
    let (policies, len) = walk(policy_of, policy)?;
    if len > tokens {
        let names: Vec<&str> = policies[..len]
            .iter()
            .rev()
            .flatten()
            .map(|p| p.name())
            .collect();
        return Err(ChainError::FewerTokens {
            policy: policy.name().to_string(),
            path: path_of(&names, None),
            levels: len,
            key: key.to_string(),
            tokens,
        });
    }
    let mut levels = [None; MAX_LEVELS];
    for (i, level) in policies[..len].iter().flatten().enumerate() {
        // The outermost of `len` levels takes the first `tokens - len + 1`
        // tokens; each level below one more.
        let key = key.level(tokens - len + 1 + i).expect("len <= tokens");
        levels[i] = Some(Level { policy: level, key });
    }
    Ok(Chain { levels, len })
}

/// How many levels an ask under `policy` is decided at: the length of its
/// chain of parents (1 without a parent), or why the chain is refused.
pub fn levels<'p>(
    policy_of: impl Fn(&str) -> Option<&'p Policy>,
    policy: &'p Policy,
) -> Result<usize, ChainError> {
    if policy.parent().is_none() {
        return Ok(1);
    }
    walk(policy_of, policy).map(|(_, len)| len)
}

/// Checks the chain of every policy in `policies` against the policies in
/// force (`policy_of`): what a config file or the policy bucket must not
/// hold. Returns the first policy whose chain is refused, with why.
pub fn check_chains<'p>(
    policy_of: impl Fn(&str) -> Option<&'p Policy> + Copy,
    policies: impl IntoIterator<Item = &'p Policy>,
) -> Result<(), (String, ChainError)> {
    for policy in policies {
        if policy.parent().is_some() {
            walk(policy_of, policy).map_err(|e| (policy.name().to_string(), e))?;
        }
    }
    Ok(())
}

/// What the levels' decisions (outermost first, each in its policy's
/// mode) sum up to, and the level that denied, if one did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Combined {
    pub decision: Decision,
    /// The index of the level that denied (outermost first).
    pub denied_by: Option<usize>,
}

/// Sums the levels' decisions up into the one answer (SPEC §17), as the
/// limits of one policy are: denied when any level denies, by the one that
/// will deny longest (its numbers, its `retry_after`, whether it is
/// blocked; the outermost of equals); allowed otherwise, with the numbers
/// of the level with the least left (the outermost of equals), the latest
/// start of any level, and `shadow_denied` if any level in shadow would
/// have denied.
/// `None` for no levels.
pub fn combine(levels: &[Decision]) -> Option<Combined> {
    let denying = levels.iter().enumerate().filter(|(_, d)| !d.allowed).fold(
        None::<(usize, &Decision)>,
        |best, (i, d)| match best {
            Some((_, b)) if b.retry_after >= d.retry_after => best,
            _ => Some((i, d)),
        },
    );
    if let Some((i, d)) = denying {
        return Some(Combined {
            decision: Decision {
                shadow_denied: false,
                wait: Nanos::ZERO,
                ..*d
            },
            denied_by: Some(i),
        });
    }
    let tightest = levels
        .iter()
        .fold(None::<&Decision>, |best, d| match best {
            Some(b) if b.remaining <= d.remaining => best,
            _ => Some(d),
        })?;
    Some(Combined {
        decision: Decision {
            shadow_denied: levels.iter().any(|d| d.shadow_denied),
            wait: levels.iter().map(|d| d.wait).max().unwrap_or(Nanos::ZERO),
            retry_after: Nanos::ZERO,
            ..*tightest
        },
        denied_by: None,
    })
}

#[cfg(test)]
mod tests;
