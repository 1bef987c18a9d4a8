//! Shadow limits (`mode = shadow`, or the overrides file): decided and counted like the others,
//! never refusing. When they can, they ride in the enforced limits' store call (the store
//! decides them as a group once the enforced ones admitted the call, and the answer carries
//! their refusal); else they take a step of their own after the enforced limits.

use super::decide::{Deciding, Phase, Step};
use super::keys::Keys;
use super::logs::{self, shadow_refusal};
use crate::error::StoreError;
use crate::model::decision::Decision;
use crate::store::{Call, Pending};
use std::time::Duration;

impl Deciding<'_, '_, '_> {
    /// After the enforced limits admitted the call with `d`: the shadow limits' refusal, if they
    /// were decided with them, else their own step.
    #[inline(always)]
    pub(super) fn shadow_after(&mut self, d: &Decision) -> Step {
        if !self.shadow_asked {
            return self.shadow();
        }
        if let Some((limit, rule, wait)) = d.shadow_refusal() {
            let policy = self.snapshot.as_deref().and_then(|s| s.shadow.policy_of(limit, rule));
            shadow_refusal(self.limiter.metrics(), self.limiter.name(), policy, wait);
        }
        self.finish()
    }

    /// The shadow limits' own step, if they have any left: decided and counted, never refusing.
    #[inline(always)]
    pub(super) fn shadow(&mut self) -> Step {
        // Decided with the enforced limits already (or failed with them).
        if self.shadow_asked {
            return self.finish();
        }
        let Some(snapshot) = self.snapshot.as_ref().filter(|s| !s.shadow.limits.is_empty()) else {
            return self.finish();
        };
        let set = &snapshot.shadow;
        let Ok(keys) = Keys::of(set, self.subjects) else {
            shadow_refusal(self.limiter.metrics(), self.limiter.name(), None, Duration::ZERO);
            return self.finish();
        };
        let call =
            Call { limits: &set.limits, subjects: keys.as_slice(), cost: self.cost, now_us: self.pinned, shadow: 0 };
        let pending = self.limiter.store().decide(&call);
        self.phase = Phase::Shadow;
        match pending {
            Pending::Ready(answer) => self.answer(answer),
            Pending::Remote(fut) => Step::Store(fut),
        }
    }

    pub(super) fn shadow_answer(&self, answer: Result<Decision, StoreError>) {
        match answer {
            Ok(d) if !d.allowed => {
                let policy = self.set().policy_of(d.limit, d.rule);
                shadow_refusal(self.limiter.metrics(), self.limiter.name(), policy, d.retry_after());
            }
            Ok(_) => {}
            // Shadow limits never refuse, whatever the failure policy.
            Err(e) => logs::store_failure(self.limiter.name(), &e),
        }
    }
}
