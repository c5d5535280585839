//! The operators' asks of one key (SPEC §8): `rl.inspect` and
//! `rl.reset`, and for a key of a global policy (SPEC §12) what they
//! send to the other regions. Apart from `decide.rs`, which decides asks.

use super::{tally, Answer, Decider, Turn};
use sluice_core::ask;
use sluice_core::key::KeyToken;
use sluice_core::policies::Override;
use sluice_core::policy::Policy;
use sluice_core::subject::Verb;
use sluice_core::wire::inspect::{
    HoldsReport, InspectReply, LimitReport, OverrideReport, PolicyReport, ResetReply,
};
use sluice_core::wire::{self, Encoding, ErrorReply};

impl Decider {
    /// `rl.inspect` or `rl.reset` of one key: under the policy the body
    /// names, or under every configured policy with state for the key.
    pub(super) fn admin<'p>(
        &self,
        turn: &mut Turn<'_, 'p, '_>,
        verb: Verb,
        token: &str,
        body: &[u8],
    ) -> Result<Answer<'p>, (ErrorReply, Encoding)> {
        let Turn {
            policies,
            owned,
            now,
            ..
        } = *turn;
        let encoding = Encoding::of_body(body);
        let key = KeyToken::parse(token).map_err(|e| (e.into(), encoding))?;
        let scope = wire::inspect::decode_scope(body).map_err(|e| (e.reply, e.encoding))?;
        let owned = self
            .locate(key, |p| (p == owned.partition).then_some(owned))
            .map_err(|e| (e, encoding))?;
        let chosen: Vec<&Policy> = match &scope.policy {
            Some(name) => vec![policies
                .get(name)
                .ok_or_else(|| (ErrorReply::unknown_policy(name), encoding))?],
            None => policies.iter().collect(),
        };
        let token = key.as_str();
        let mut counter = String::new();
        if verb == Verb::Inspect {
            let mut reports = Vec::new();
            let mut gather = Vec::new();
            for base in chosen {
                ask::counter_key(&mut counter, base.name(), token);
                let state = owned.counters.state(&counter);
                let over = policies.override_of(base.name(), token);
                let held = owned.counters.outstanding().holds_of(&counter, now);
                // A global key's state may be in the other regions only.
                let global = base.scope().global().filter(|_| !turn.link);
                if state.is_none() && over.is_none() && held.live == 0 && global.is_none() {
                    continue;
                }
                // The limits in force for this key: an override's, if any;
                // of a global bucket, this region's part.
                let in_force = policies.in_force(base, token);
                let policy = in_force.counted_under(self.region());
                let state = state.unwrap_or_else(|| policy.new_state());
                reports.push(PolicyReport {
                    policy: base.name().to_string(),
                    algorithm: base.algorithm().as_str().to_string(),
                    limits: policy
                        .inspect(&state, now)
                        .iter()
                        .map(LimitReport::from)
                        .collect(),
                    overridden: over.map(|o| OverrideReport {
                        blocked: *o == Override::Blocked,
                    }),
                    holds: (held.live > 0).then(|| HoldsReport {
                        live: held.live,
                        held: held.held,
                        slots: base.holding().concurrency.map(|n| (held.slots, n)),
                    }),
                    blocked_until: policy
                        .blocked_until(&state, now)
                        .map(|until| until.as_millis_ceil()),
                    regions: None,
                });
                let local = reports.last().map(|r| r.limits.clone());
                if let (Some(global), Some(local)) = (global, local) {
                    gather.extend(self.gather_of(in_force, global, local, now));
                }
            }
            let reply = InspectReply {
                key: token.to_string(),
                policies: reports,
            };
            if !gather.is_empty() {
                return Ok(Answer::Gather(crate::global::Gather {
                    reply,
                    encoding: scope.encoding,
                    partition: owned.partition,
                    policies: gather,
                }));
            }
            return Ok(Answer::Inspect(reply, scope.encoding));
        }
        let mut reset = Vec::new();
        let mut regions = Vec::new();
        for policy in chosen {
            ask::counter_key(&mut counter, policy.name(), token);
            tally::forget_tallies(policy, &counter, owned.counters);
            if owned.counters.forget(&counter) {
                turn.log.reset(policy.name(), token, now);
                reset.push(policy.name().to_string());
            }
            // A global key's state is in every region it holds across:
            // each forgets its own (not again when the reset came so).
            if !turn.link {
                regions.extend(self.reset_elsewhere(turn, policy, token));
            }
        }
        regions.sort();
        regions.dedup();
        let reply = ResetReply {
            key: token.to_string(),
            reset,
            regions,
        };
        Ok(Answer::Reset(reply, scope.encoding))
    }
}
