//! The store's answer to the enforced limits: the permit's decision, a refusal (remembered by
//! the refusal cache when it stands), a checked decision under runtime overrides, and a failed
//! store under the limiter's failure policy.

use crate::algorithm::Algorithm;
use crate::config::FailurePolicy;
use crate::error::StoreError;
use crate::limiter::decide::{record_quota, Deciding, Phase, Step};
use crate::limiter::keys::Keys;
use crate::limiter::logs;
use crate::limiter::permit::Admitted;
use crate::limiter::refusal_cache::{self, Refusal};
use crate::limiter::under_override::{UnderOverride, Verdict};
use crate::metrics::Outcome;
use crate::model::decision::{Decision, Why};
use crate::model::refusal::Cause;
use crate::store::{Call, Operations, Pending};
use std::sync::atomic::Ordering;
use std::time::Duration;

impl Deciding<'_, '_, '_> {
    #[inline(always)]
    pub(super) fn enforced_answer(&mut self, answer: Result<Decision, StoreError>) -> Step {
        if let (Ok(d), true) = (&answer, self.overriding.is_some()) {
            if let Some(step) = self.checked(&{ *d }) {
                return step;
            }
        }
        let set = self.set();
        match answer {
            Ok(d) if d.allowed => {
                // The quota names the limit among the decided set's; the permit, among the
                // enforced set's.
                record_quota(|| set, &d);
                self.allowed = Some(Admitted::of(&self.in_enforced_set(d)));
                self.shadow_after(&d)
            }
            Ok(d) => {
                self.refuse(&d);
                Step::Done
            }
            Err(e) if self.phase == Phase::Exact => {
                // The `sync` limits' units go back; the failure policy decides the whole call.
                self.give_back_synced();
                self.phase = Phase::Enforced;
                self.enforced_answer(Err(e))
            }
            Err(e) => match self.limiter.failure_policy() {
                FailurePolicy::Local if !self.local => self.decide_locally(&e),
                // (`Local` here: process memory failed too, which it cannot.)
                FailurePolicy::Allow | FailurePolicy::Local => {
                    logs::store_failure(self.limiter.name(), &e);
                    self.outcome = Outcome::FailedOpen;
                    self.shadow()
                }
                FailurePolicy::Deny => {
                    logs::refusing_calls(self.limiter.name(), &e);
                    // A configuration no retry can fix is the server's error, not an outage.
                    let cause = match e {
                        StoreError::Misconfigured { .. } => Cause::Misconfigured,
                        _ => Cause::StoreUnavailable,
                    };
                    let refused = self.refusal(set.limit_type(0), None, Duration::from_secs(1), cause, Some(e));
                    self.done(Some(refused), Outcome::FailedClosed)
                }
            },
        }
    }

    /// The enforced limits refused the call with `d`: the refusal, naming the rule in force,
    /// and remembered by the refusal cache when it stands. The decision is then done.
    pub(super) fn refuse(&mut self, d: &Decision) {
        let set = self.set();
        // A full concurrency limit can free a slot any moment: such a refusal is never
        // cached. A block stands until its end, as a refusal by a rule does.
        let (cause, policy) = match d.why {
            Why::Concurrency => (Cause::Concurrency, None),
            // Only a checked decision says so, and `checked` takes it.
            Why::OverridesChanged => (Cause::Exceeded, None),
            Why::Exceeded | Why::Blocked => {
                self.remember(d);
                (Cause::Exceeded, set.policy_of(d.limit, d.rule))
            }
        };
        let refused = self.refusal(set.limit_type(d.limit), policy, d.retry_after(), cause, None);
        self.give_back_synced();
        self.done(Some(refused), Outcome::Denied);
    }

    /// `d` with its limit's index in the enforced set (a decision of the limits without
    /// `sync` names its limit among those).
    pub(super) fn in_enforced_set(&self, d: Decision) -> Decision {
        if self.phase != Phase::Exact {
            return d;
        }
        let at = self.enforced_set().synced.as_deref().and_then(|s| s.exact_at.get(d.limit).copied());
        Decision { limit: at.unwrap_or(d.limit), ..d }
    }

    /// The store failed under `on_error = local`: the same limits, decided in process memory.
    /// Calls come back to the store as soon as it answers (the circuit breaker holds them off
    /// only for its pause).
    #[cold]
    #[inline(never)]
    pub(super) fn decide_locally(&mut self, error: &StoreError) -> Step {
        logs::local_decisions(self.limiter.name(), error);
        self.local = true;
        let set = self.set();
        // The keys were found before the store was called.
        let Ok(keys) = Keys::of(set, self.subjects) else { return self.shadow() };
        let call =
            Call { limits: &set.limits, subjects: keys.as_slice(), cost: self.cost, now_us: self.pinned, shadow: 0 };
        let pending = self.limiter.local_store().decide(&call);
        match pending {
            Pending::Ready(answer) => self.enforced_answer(answer),
            Pending::Remote(fut) => Step::Store(fut),
        }
    }

    /// Remembers a refusal in the refusal cache, when it is on and the refusal stands.
    pub(super) fn remember(&self, d: &Decision) {
        // A refusal from process memory is not the store's: it must not outlive the outage.
        if self.local {
            return;
        }
        let Some(at) = self.cache_at else { return };
        let set = self.set();
        // A block's wait and the sliding window's are exact; the O(1) algorithms' may be a µs long.
        let sliding =
            d.why == Why::Blocked || set.limits.get(d.limit).is_some_and(|l| l.algorithm == Algorithm::SlidingWindow);
        let Some(refusal) = Refusal::of(d, sliding, at, self.cost, self.pinned.is_some()) else { return };
        let Ok(keys) = Keys::of(set, self.subjects) else { return };
        refusal_cache::global().insert(set.owner(self.limiter.store()), keys.as_slice(), refusal);
        set.ever_refused.store(true, Ordering::Relaxed);
    }

    /// What a checked decision `d` means before it is read as any other: overrides that changed
    /// under the call (decided again with the ones the store taught, a few times at most),
    /// else a decision, counted when made under an override.
    pub(super) fn checked(&mut self, d: &Decision) -> Option<Step> {
        match UnderOverride::verdict(self.overriding.as_deref(), d)? {
            Verdict::Decided { under_override } => {
                if under_override {
                    self.limiter.metrics().override_decision();
                }
                None
            }
            Verdict::GaveUp => {
                Some(self.enforced_answer(Err(StoreError::other("runtime overrides kept changing under the call"))))
            }
            Verdict::Relearn(n) => {
                let base = self.limiter.enforced(self.snapshot.as_deref());
                *self.overriding = UnderOverride::of(self.limiter, base, self.subjects).map(|o| o.relearned(n));
                Some(self.enforce())
            }
        }
    }
}
