//! A call's limits under the runtime overrides this process knows of, and what its store's
//! checked answer means: decided (under an override or not), or overrides that changed under
//! the call, to learn and decide again (see docs/design.md, "Runtime overrides").

use super::limit_set::LimitSet;
use super::Limiter;
use crate::model::decision::{Decision, Why};
use crate::model::overriding::decode_rules;
use crate::model::subject::Subject;
use crate::store::{OverrideCheck, INTERNAL};

/// How many times one call decides again after learning that overrides changed under it (each
/// time a store call): more means they keep changing, and the call fails as a store error does.
const MAX_RELEARNS: u8 = 2;

/// What a checked decision means before it is read as any other.
pub(crate) enum Verdict {
    /// A decision: `under_override` when an override's rules made it (metrics count those).
    Decided { under_override: bool },
    /// Overrides changed under the call: learn them and decide again (the `n`th time).
    Relearn(u8),
    /// They changed too many times in a row.
    GaveUp,
}

/// A call's limits under the overrides this process knows of, and the checks its store call
/// makes that they are the ones in force.
pub(crate) struct UnderOverride {
    /// The limits in force with the overrides' rules in place (`None`: no subject of the call
    /// has one, and the limits in force decide as they are).
    pub(crate) set: Option<LimitSet>,
    /// One per limit of the set.
    pub(crate) checks: Vec<OverrideCheck>,
    /// How many times this call learnt that overrides changed.
    relearned: u8,
}

impl UnderOverride {
    /// The call's limits under the overrides its store knows of, from `base` (the limits in
    /// force for the call). `None` for limits with `sync` (their reserves are not overridden).
    pub(crate) fn of(limiter: &Limiter, base: &LimitSet, subjects: &[Subject<'_>]) -> Option<Box<UnderOverride>> {
        if base.synced.is_some() {
            return None;
        }
        let store = limiter.store();
        let mut checks = Vec::with_capacity(base.limits.len());
        let mut rules = Vec::with_capacity(base.limits.len());
        for (i, limit) in base.limits.iter().enumerate() {
            let subject = subjects.get(base.subject_of(i)).and_then(Subject::key_bytes);
            match subject.filter(|_| !limit.is_concurrency()) {
                Some(subject) => {
                    let key = limit.override_key(subject);
                    let known = store.override_of(&key, INTERNAL);
                    // Text no override writes is checked as it is, and decided without.
                    rules.push(known.as_deref().and_then(decode_rules));
                    checks.push(OverrideCheck { key, expected: known });
                }
                None => {
                    rules.push(None);
                    checks.push(OverrideCheck { key: Vec::new(), expected: None });
                }
            }
        }
        let set = rules.iter().any(Option::is_some).then(|| {
            let mut limits = Vec::with_capacity(base.limits.len());
            let mut policies = Vec::new();
            for (limit, rules) in base.limits.iter().zip(&rules) {
                let limit = limit.overridden(rules.as_deref(), policies.len());
                policies.extend(limit.policies());
                limits.push(limit);
            }
            LimitSet::new(limits, base.index.clone(), policies.into())
        });
        Some(Box::new(UnderOverride { set, checks, relearned: 0 }))
    }
}

impl UnderOverride {
    /// What the checked decision `d` of a call deciding under `o` means (`None`: the call
    /// decides without overrides).
    pub(crate) fn verdict(o: Option<&UnderOverride>, d: &Decision) -> Option<Verdict> {
        let o = o?;
        if d.allowed || d.why != Why::OverridesChanged {
            return Some(Verdict::Decided { under_override: o.set.is_some() });
        }
        if o.relearned >= MAX_RELEARNS {
            return Some(Verdict::GaveUp);
        }
        Some(Verdict::Relearn(o.relearned + 1))
    }

    /// Marks these limits as learnt on the `n`th relearning of a call.
    pub(crate) fn relearned(mut self: Box<Self>, n: u8) -> Box<Self> {
        self.relearned = n;
        self
    }
}
