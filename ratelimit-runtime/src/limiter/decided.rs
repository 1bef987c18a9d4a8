//! The end of a decision: a finished one handed out as a permit or a refusal, and the refusal
//! built from what refused, naming the rules in force.

use super::decide::{Deciding, Step};
use crate::error::StoreError;
use crate::limiter::permit::Permit;
use crate::metrics::Outcome;
use crate::model::limit_type::LimitType;
use crate::model::policy::Policy;
use crate::model::refusal::{Cause, Failure, RateLimited};
use std::time::Duration;

impl<'l> Deciding<'l, '_, '_> {
    /// Every step passed: the permit.
    #[inline]
    pub(super) fn finish(&mut self) -> Step {
        Step::Done
    }

    #[inline]
    pub(super) fn done(&mut self, refused: Option<RateLimited>, outcome: Outcome) -> Step {
        *self.refused = refused;
        self.outcome = outcome;
        Step::Done
    }

    /// What metrics count the finished decision as (after [`Step::Done`]).
    #[inline]
    pub(crate) fn outcome(&self) -> Outcome {
        self.outcome
    }

    /// The finished decision (after [`Step::Done`]): the permit, or the refusal. Takes its
    /// parts out rather than moving the whole (large) decision under way.
    #[inline(always)]
    pub(crate) fn decided(&mut self) -> Result<Permit<'l>, RateLimited> {
        match self.refused.take() {
            Some(refused) => Err(refused),
            None => Permit::new(
                self.limiter,
                self.allowed.as_ref(),
                self.snapshot.take(),
                self.cost,
                self.subjects,
                self.pinned.is_some(),
                self.local,
            ),
        }
    }

    pub(super) fn refusal(
        &self,
        limit_type: LimitType,
        policy: Option<Policy>,
        retry_after: Duration,
        cause: Cause,
        source: Option<StoreError>,
    ) -> RateLimited {
        // Errors name the enforced rules, whichever phase refused.
        let policies = match (&*self.snapshot, self.overriding.as_ref().and_then(|o| o.set.as_ref())) {
            (_, Some(overridden)) => overridden.policies.clone(),
            (Some(s), None) => s.enforced.policies.clone(),
            (None, None) => self.limiter.own().policies.clone(),
        };
        RateLimited {
            limiter: self.limiter.name_arc(),
            policy,
            policies,
            retry_after,
            cause,
            limit_type,
            source: source.map(|e| Box::new(Failure::Store(e))),
        }
    }
}
