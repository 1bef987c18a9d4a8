//! The one decision path, from a call's subjects to a decision: [`Limiter::decide`].
//!
//! Async and blocking calls, with or without the overrides file, all go through it. It does
//! everything that needs no store (exemptions, missing subjects, the refusal cache) and stops
//! where a store's answer is needed: [`Step::Store`] hands back the store's future with the
//! decision so far. The async entry points finish that future with `io::await_remote`, the
//! blocking ones with `io::block_on`, and give the answer to [`Deciding::answer`]; that is the
//! only difference between them. An in-memory store answers at once, and the whole decision
//! is then one call without a future.
//!
//! Under the overrides file (or with `mode = shadow`) the shadow limits, which only log and
//! count, are decided in the same store call as the enforced ones: the store decides the
//! enforced limits, and only if they admit the call, the shadow ones as a group, its answer
//! carrying their refusal ([`Decision::shadow_refusal`]). A second store step for the shadow
//! limits remains where they cannot ride along: a set with `sync` limits (whose reserves decide
//! first), a call whose shadow subject is missing (logged, no store call), and the shadow
//! limits of a call without enforced ones (then the only step).

use crate::algorithm::Algorithm;
use crate::config::{self, FailurePolicy};
use crate::context;
use crate::error::Cause;
use crate::error::RateLimited;
use crate::error::StoreError;
use crate::limiter::epoch_us;
use crate::limiter::limit_set::{Keys, LimitSet};
use crate::limiter::permit::Permit;
use crate::limiter::refusal_cache::{self, Refusal};
use crate::limiter::reserve::Take;
use crate::limiter::snapshot::{shadow_refusal, Snapshot};
use crate::limiter::Limiter;
use crate::metrics;
use crate::metrics::Outcome;
use crate::model::decision::{Decision, Why};
use crate::model::limit_type::LimitType;
use crate::model::policy::Policy;
use crate::model::subject::Subject;
use crate::rt::io;
use crate::store::{Call, Operations, Pending, RemoteDecision, INTERNAL};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use std::time::SystemTime;

/// Where a decision stands: finished (see [`Deciding::decided`]), or waiting for a store's
/// answer. Small, so that steps cost no copies.
pub(crate) enum Step {
    Done,
    /// Finish the future (await it, or block on it) and give its answer to
    /// [`Deciding::answer`].
    Store(RemoteDecision),
}

/// Which limits the store is deciding.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Enforced,
    /// A `sync` limit's batch (or, while another call fills its reserve, this call alone).
    Reserve,
    /// The limits without `sync` of a set that has some, once the `sync` ones passed.
    Exact,
    Shadow,
}

/// Where the `sync` limits of a decision stand.
#[derive(Clone, Copy, Default)]
struct HotStep {
    /// The `sync` limits before this one took their units (given back if a later limit refuses).
    pos: usize,
    /// What the store is asked for the current one: a batch for its reserve (`batch` units), or
    /// just this call (`fill` false).
    batch: u64,
    fill: bool,
    /// The time the reserves are read at (µs, the refusal cache's clock).
    now_us: u64,
}

/// A decision under way: the call, the limits in force, and what is decided so far.
pub(crate) struct Deciding<'l, 's, 'a> {
    limiter: &'l Limiter,
    /// The limits in force under the overrides file (or a shadow limit), if any.
    snapshot: Option<Arc<Snapshot>>,
    subjects: &'s [Subject<'a>],
    cost: u64,
    /// The time pinned by the caller (µs since the Unix epoch).
    pinned: Option<u64>,
    /// When the call left, on the refusal cache's clock, when the cache is on.
    cache_at: Option<u64>,
    phase: Phase,
    /// The enforced limits' decision, once allowed. Kept whole (copied in whole 16-byte words
    /// from the store's answer, long written by then); the permit takes what it keeps of it
    /// field by field where it is built. What it keeps, written here in pieces, was read back
    /// whole by the permit right after, and those reads stalled on the pieces.
    allowed: Option<Decision>,
    outcome: Outcome,
    /// The refusal, if the call is refused (else the call is permitted with `allowed`).
    refused: Option<RateLimited>,
    /// The store failed and the enforced limits are decided in process memory
    /// (`FailurePolicy::Local`).
    local: bool,
    /// The shadow limits went to the store with the enforced ones: there is no shadow step
    /// (after a store failure either, which they shared).
    shadow_asked: bool,
    hot: HotStep,
}

impl Limiter {
    /// The one decision path: starts deciding a call of `cost` units for `subjects` (one per
    /// limit) in `tier` (which only chooses the limits in force) at the store's time, or at
    /// `pinned` µs since the epoch. Returns the decision under way and its first step: done, or
    /// the store call it waits for (see the module's documentation).
    #[inline(always)]
    pub(crate) fn decide<'l, 's, 'a>(
        &'l self,
        subjects: &'s [Subject<'a>],
        cost: u64,
        pinned: Option<u64>,
        tier: Option<&str>,
    ) -> Deciding<'l, 's, 'a> {
        Deciding {
            limiter: self,
            snapshot: self.snapshot_for(tier),
            subjects,
            cost,
            pinned,
            cache_at: None,
            phase: Phase::Enforced,
            allowed: None,
            outcome: Outcome::Allowed,
            refused: None,
            local: false,
            shadow_asked: false,
            hot: HotStep::default(),
        }
    }
}

impl<'l, 's, 'a> Deciding<'l, 's, 'a> {
    /// The first step: exemptions, then the enforced limits.
    #[inline(always)]
    pub(crate) fn start(&mut self) -> Step {
        if self.snapshot.as_ref().is_some_and(|s| s.is_exempt(self.subjects)) {
            return self.done(None, Outcome::Exempt);
        }
        self.enforce()
    }

    /// The set the current phase decides.
    #[inline(always)]
    fn set(&self) -> &LimitSet {
        match self.phase {
            Phase::Enforced | Phase::Reserve => self.enforced_set(),
            Phase::Exact => self.enforced_set().hot.as_deref().map_or(self.enforced_set(), |h| &h.exact),
            Phase::Shadow => self.snapshot.as_deref().map_or(self.limiter.own(), |s| &s.shadow),
        }
    }

    /// The enforced limits, all of them.
    #[inline]
    fn enforced_set(&self) -> &LimitSet {
        self.limiter.enforced(self.snapshot.as_deref())
    }

    /// The enforced limits: the refusal cache, then the store.
    #[inline(always)]
    fn enforce(&mut self) -> Step {
        if self.set().limits.is_empty() {
            return self.shadow();
        }
        let store = self.limiter.store();
        if self.limiter.refusal_cache_on(store) {
            self.cache_at = Some(self.pinned.unwrap_or_else(|| store.now_us(INTERNAL)));
        }
        let set = self.set();
        let keys = match Keys::of(set, self.subjects) {
            Ok(keys) => keys,
            Err(i) => {
                let missing = self.refusal(set.limit_type(i), None, Duration::ZERO, Cause::SubjectMissing, None);
                return self.done(Some(missing), Outcome::SubjectMissing);
            }
        };
        // A cost above a rule's capacity would be refused by every store forever: say so at once,
        // without a store call and without a retry-after that could not be kept.
        if self.cost > set.min_capacity {
            if let Some((g, r)) =
                set.limits.iter().enumerate().find_map(|(g, l)| Some((g, l.rule_too_small(self.cost)?)))
            {
                let refused =
                    self.refusal(set.limit_type(g), set.policy_of(g, r), Duration::ZERO, Cause::CostTooHigh, None);
                return self.done(Some(refused), Outcome::Denied);
            }
        }
        if set.hot.is_some() {
            // Each reserve answers its key's refusals itself; the exact limits' refusals are
            // not cached (a cached refusal would name the whole set's keys).
            self.cache_at = None;
            self.hot.now_us = self.pinned.unwrap_or_else(|| store.now_us(INTERNAL));
            return self.hot_from(0, keys.as_slice());
        }
        if let Some(now) = self.cache_at {
            if let Some(refused) = self.cached_refusal(&keys, now) {
                return self.done(Some(refused), Outcome::Denied);
            }
        }
        // The shadow limits ride along when they have their subjects (else the shadow step
        // logs the missing one).
        let joined = self.snapshot.as_deref().and_then(|s| s.joined.as_ref());
        let joined = joined.and_then(|j| Some((j, Keys::of(j, self.subjects).ok()?)));
        let call = match &joined {
            Some((j, both)) => Call {
                limits: &j.limits,
                subjects: both.as_slice(),
                cost: self.cost,
                now_us: self.pinned,
                shadow: j.limits.len().saturating_sub(set.limits.len()),
            },
            None => {
                Call { limits: &set.limits, subjects: keys.as_slice(), cost: self.cost, now_us: self.pinned, shadow: 0 }
            }
        };
        let pending = store.decide(&call);
        self.shadow_asked = joined.is_some();
        match pending {
            // The usual answer of an in-memory store, read where it lies: moving the whole
            // decision again, fresh from the store, costs more than the rest of this step.
            Pending::Ready(Ok(ref d)) if d.allowed => self.admit(d),
            Pending::Ready(answer) => self.answer(answer),
            Pending::Remote(fut) => Step::Store(fut),
        }
    }

    /// The enforced limits allowed the call with `d` (its limit an index of the enforced set).
    #[inline(always)]
    fn admit(&mut self, d: &Decision) -> Step {
        record_quota(self.set(), d);
        self.allowed = Some(*d);
        self.shadow_after(d)
    }

    /// The `sync` limits from the `pos`-th on take the cost from their reserves (asking the
    /// store where a reserve is empty), then the others are decided by the store.
    /// `keys` are the enforced set's.
    fn hot_from(&mut self, pos: usize, keys: &[&[u8]]) -> Step {
        let set = self.enforced_set();
        let Some(hot) = set.hot.as_deref() else { return self.shadow() };
        let now_us = self.hot.now_us;
        for p in pos..hot.limits.len() {
            let Some(&(at, ref reserves)) = hot.limits.get(p) else { break };
            let key = keys.get(at).copied().unwrap_or_default();
            let (batch, fill) = match reserves.take(key, self.cost, now_us) {
                Take::Taken { remaining, rule } => {
                    record_quota(set, &Decision { limit: at, rule, remaining, ..Decision::admitted(now_us) });
                    continue;
                }
                Take::Refused { until_us, rule } => {
                    let wait = Duration::from_micros(until_us.saturating_sub(now_us));
                    let refused =
                        self.refusal(set.limit_type(at), set.policy_of(at, rule), wait, Cause::Exceeded, None);
                    self.limiter.metrics().local_denial();
                    self.hot.pos = p;
                    self.give_back_hot();
                    return self.done(Some(refused), Outcome::Denied);
                }
                Take::Fill { batch } => (batch, true),
                Take::Exact => (self.cost, false),
            };
            let pending = self.ask_one(at, batch, keys);
            self.hot = HotStep { pos: p, batch, fill, now_us };
            self.phase = Phase::Reserve;
            return self.pending(pending);
        }
        let taken = hot.limits.len();
        if hot.exact.limits.is_empty() {
            return self.shadow();
        }
        let pending = match Keys::of(&hot.exact, self.subjects) {
            Ok(keys) => {
                let call = Call {
                    limits: &hot.exact.limits,
                    subjects: keys.as_slice(),
                    cost: self.cost,
                    now_us: self.pinned,
                    shadow: 0,
                };
                self.limiter.store().decide(&call)
            }
            Err(_) => return self.shadow(),
        };
        self.hot.pos = taken;
        self.phase = Phase::Exact;
        self.pending(pending)
    }

    /// Asks the store for `cost` units of the enforced set's limit `at` alone (`keys`: the
    /// enforced set's).
    fn ask_one(&self, at: usize, cost: u64, keys: &[&[u8]]) -> Pending {
        let set = self.enforced_set();
        let subjects = keys.get(at..=at).unwrap_or_default();
        let limits = set.limits.get(at..=at).unwrap_or_default();
        let call = Call { limits, subjects, cost, now_us: self.pinned, shadow: 0 };
        self.limiter.store().decide(&call)
    }

    /// Goes on with a store's answer, now or once it arrives.
    #[inline]
    fn pending(&mut self, pending: Pending) -> Step {
        match pending {
            Pending::Ready(answer) => self.answer(answer),
            Pending::Remote(fut) => Step::Store(fut),
        }
    }

    /// The store's answer for a `sync` limit's batch (or for this call alone).
    fn reserve_answer(&mut self, answer: Result<Decision, StoreError>) -> Step {
        let set = self.enforced_set();
        let HotStep { pos, batch, fill, now_us } = self.hot;
        let (Some(&(at, ref reserves)), Ok(keys)) =
            (set.hot.as_deref().and_then(|h| h.limits.get(pos)), Keys::of(set, self.subjects))
        else {
            return self.shadow();
        };
        let keys = keys.as_slice();
        let key = keys.get(at).copied().unwrap_or_default();
        match answer {
            Ok(d) if d.allowed => {
                if fill {
                    reserves.filled(key, batch, self.cost, d.remaining, d.rule, now_us);
                }
                record_quota(set, &Decision { limit: at, ..d });
                self.hot_from(pos + 1, keys)
            }
            Ok(_) if fill && batch > self.cost => {
                // No room for a batch: perhaps for this call alone. Smaller batches follow.
                reserves.refused(key, batch, self.cost, None);
                let pending = self.ask_one(at, self.cost, keys);
                self.hot = HotStep { fill: false, batch: self.cost, ..self.hot };
                self.pending(pending)
            }
            Ok(d) => {
                let until = now_us.saturating_add(u64::try_from(d.retry_after.as_micros()).unwrap_or(u64::MAX));
                if fill {
                    reserves.refused(key, batch, self.cost, Some((until, d.rule)));
                } else {
                    reserves.refuse_until(key, until, d.rule);
                }
                let refused =
                    self.refusal(set.limit_type(at), set.policy_of(at, d.rule), d.retry_after, Cause::Exceeded, None);
                self.give_back_hot();
                self.done(Some(refused), Outcome::Denied)
            }
            Err(e) => {
                if fill {
                    reserves.failed(key);
                }
                self.give_back_hot();
                self.phase = Phase::Enforced;
                self.enforced_answer(Err(e))
            }
        }
    }

    /// Gives back the units the `sync` limits before the current one took: a later limit
    /// refused the call (all pass, or none counts), or the store failed.
    fn give_back_hot(&mut self) {
        let upto = std::mem::take(&mut self.hot.pos);
        if upto == 0 {
            return;
        }
        let set = self.enforced_set();
        let (Some(hot), Ok(keys)) = (set.hot.as_deref(), Keys::of(set, self.subjects)) else { return };
        for (at, reserves) in hot.limits.iter().take(upto) {
            reserves.give_back(keys.as_slice().get(*at).copied().unwrap_or_default(), self.cost, self.hot.now_us);
        }
    }

    /// A refusal the cache still holds for these keys at `now`: the remaining retry-after,
    /// counted as a local denial.
    fn cached_refusal(&self, keys: &Keys<'_>, now: u64) -> Option<RateLimited> {
        let set = self.set();
        if !set.ever_refused.load(Ordering::Relaxed) {
            return None;
        }
        let owner = set.owner(self.limiter.store());
        let r = refusal_cache::global().get(owner, keys.as_slice(), self.cost, (now, self.pinned.is_some()))?;
        self.limiter.metrics().local_denial();
        let retry_after = Duration::from_micros(r.until_us.saturating_sub(now));
        Some(self.refusal(set.limit_type(r.limit), set.policy_of(r.limit, r.rule), retry_after, Cause::Exceeded, None))
    }

    /// Continues the decision with the store's answer to the step it waited for.
    #[inline(always)]
    pub(crate) fn answer(&mut self, answer: Result<Decision, StoreError>) -> Step {
        match self.phase {
            Phase::Enforced | Phase::Exact => self.enforced_answer(answer),
            Phase::Reserve => self.reserve_answer(answer),
            Phase::Shadow => {
                self.shadow_answer(answer);
                self.finish()
            }
        }
    }

    #[inline(always)]
    fn enforced_answer(&mut self, answer: Result<Decision, StoreError>) -> Step {
        let set = self.set();
        match answer {
            Ok(d) if d.allowed => {
                // The quota names the limit among the decided set's; the permit, among the
                // enforced set's.
                record_quota(set, &d);
                self.allowed = Some(self.in_enforced_set(d));
                self.shadow_after(&d)
            }
            Ok(d) => {
                // A full concurrency limit can free a slot any moment: such a refusal is never
                // cached. A block stands until its end, as a refusal by a rule does.
                let (cause, policy) = match d.why {
                    Why::Concurrency => (Cause::Concurrency, None),
                    Why::Exceeded | Why::Blocked => {
                        self.remember(&d);
                        (Cause::Exceeded, set.policy_of(d.limit, d.rule))
                    }
                };
                let refused = self.refusal(set.limit_type(d.limit), policy, d.retry_after, cause, None);
                self.give_back_hot();
                self.done(Some(refused), Outcome::Denied)
            }
            Err(e) if self.phase == Phase::Exact => {
                // The `sync` limits' units go back; the failure policy decides the whole call.
                self.give_back_hot();
                self.phase = Phase::Enforced;
                self.enforced_answer(Err(e))
            }
            Err(e) => match self.limiter.failure_policy() {
                FailurePolicy::Local if !self.local => self.decide_locally(&e),
                // (`Local` here: process memory failed too, which it cannot.)
                FailurePolicy::Allow | FailurePolicy::Local => {
                    config::warn_store_failure(self.limiter.name(), &e);
                    self.outcome = Outcome::FailedOpen;
                    self.shadow()
                }
                FailurePolicy::Deny => {
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

    /// `d` with its limit's index in the enforced set (a decision of the limits without
    /// `sync` names its limit among those).
    fn in_enforced_set(&self, d: Decision) -> Decision {
        if self.phase != Phase::Exact {
            return d;
        }
        let at = self.enforced_set().hot.as_deref().and_then(|h| h.exact_at.get(d.limit).copied());
        Decision { limit: at.unwrap_or(d.limit), ..d }
    }

    /// The store failed under `on_error = local`: the same limits, decided in process memory.
    /// Calls come back to the store as soon as it answers (the circuit breaker holds them off
    /// only for its pause).
    #[cold]
    #[inline(never)]
    fn decide_locally(&mut self, error: &StoreError) -> Step {
        config::warn_local_decisions(self.limiter.name(), error);
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
    fn remember(&self, d: &Decision) {
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

    /// After the enforced limits admitted the call with `d`: the shadow limits' refusal, if they
    /// were decided with them, else their own step.
    #[inline(always)]
    fn shadow_after(&mut self, d: &Decision) -> Step {
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
    fn shadow(&mut self) -> Step {
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

    fn shadow_answer(&self, answer: Result<Decision, StoreError>) {
        match answer {
            Ok(d) if !d.allowed => {
                let policy = self.set().policy_of(d.limit, d.rule);
                shadow_refusal(self.limiter.metrics(), self.limiter.name(), policy, d.retry_after);
            }
            Ok(_) => {}
            // Shadow limits never refuse, whatever the failure policy.
            Err(e) => config::warn_store_failure(self.limiter.name(), &e),
        }
    }

    /// Every step passed: the permit.
    #[inline]
    fn finish(&mut self) -> Step {
        Step::Done
    }

    #[inline]
    fn done(&mut self, refused: Option<RateLimited>, outcome: Outcome) -> Step {
        self.refused = refused;
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

    fn refusal(
        &self,
        limit_type: LimitType,
        policy: Option<Policy>,
        retry_after: Duration,
        cause: Cause,
        source: Option<StoreError>,
    ) -> RateLimited {
        // Errors name the enforced rules, whichever phase refused.
        let policies = match &self.snapshot {
            Some(s) => s.enforced.policies.clone(),
            None => self.limiter.own().policies.clone(),
        };
        RateLimited {
            limiter: self.limiter.name_arc(),
            policy,
            policies,
            retry_after,
            cause,
            limit_type,
            source: source.map(Box::new),
        }
    }
}

/// Gives an HTTP request (a context) the quota `d` leaves in `set`, for its headers; nothing
/// else wants it. Inlined: a decision outside a request pays one look, not a call.
#[inline(always)]
fn record_quota(set: &LimitSet, d: &Decision) {
    if let Some(ctx) = context::current() {
        record_quota_in(&ctx, set, d);
    }
}

#[inline(never)]
fn record_quota_in(ctx: &context::RequestContext, set: &LimitSet, d: &Decision) {
    if let Some(q) = set.quota(d) {
        ctx.record_quota(q);
    }
}

/// The entry points: the async ones await a remote store's answer, the blocking ones block on
/// it; everything else is `Limiter::decide`'s.
impl Limiter {
    /// Decides a call of `cost` units: `subjects` holds one subject per limit, in the order the
    /// limits were added. Works from any async runtime (Redis connections live on the library's
    /// own I/O runtime).
    pub async fn check(&self, subjects: &[Subject<'_>], cost: u64) -> Result<Permit<'_>, RateLimited> {
        self.check_pinned(subjects, cost, None, None).await
    }

    /// As [`check`](Self::check), for a caller in `tier` (e.g. the user's plan): decided by the
    /// tier's rules where code ([`LimiterBuilder::tier`](crate::LimiterBuilder::tier),
    /// [`Config::tier`](crate::Config::tier)) or the overrides file gives them, else by the
    /// limits' own. Any text may be passed: a tier nobody configured is decided as a call
    /// without a tier, and leaves no trace.
    pub async fn check_tier(&self, subjects: &[Subject<'_>], cost: u64, tier: &str) -> Result<Permit<'_>, RateLimited> {
        self.check_pinned(subjects, cost, None, Some(tier)).await
    }

    /// As [`check`](Self::check), at the time `at` instead of the store's clock: deterministic
    /// tests, and platforms that forbid `TIME` in scripts.
    pub async fn check_at(
        &self,
        subjects: &[Subject<'_>],
        cost: u64,
        at: SystemTime,
    ) -> Result<Permit<'_>, RateLimited> {
        self.check_pinned(subjects, cost, Some(epoch_us(at)), None).await
    }

    pub(crate) async fn check_pinned(
        &self,
        subjects: &[Subject<'_>],
        cost: u64,
        pinned: Option<u64>,
        tier: Option<&str>,
    ) -> Result<Permit<'_>, RateLimited> {
        let started = metrics::start_timer();
        let mut deciding = self.decide(subjects, cost, pinned, tier);
        let mut step = deciding.start();
        while let Step::Store(fut) = step {
            step = deciding.answer(io::await_remote(fut).await);
        }
        self.metrics().report(deciding.outcome(), started, subjects);
        deciding.decided()
    }

    /// As [`check`](Self::check), blocking the thread: for plain `fn`s. Needs no async runtime
    /// of the caller's.
    #[inline]
    pub fn check_blocking(&self, subjects: &[Subject<'_>], cost: u64) -> Result<Permit<'_>, RateLimited> {
        self.check_blocking_pinned(subjects, cost, None, None)
    }

    /// As [`check_tier`](Self::check_tier), blocking the thread.
    #[inline]
    pub fn check_tier_blocking(
        &self,
        subjects: &[Subject<'_>],
        cost: u64,
        tier: &str,
    ) -> Result<Permit<'_>, RateLimited> {
        self.check_blocking_pinned(subjects, cost, None, Some(tier))
    }

    /// As [`check_blocking`](Self::check_blocking) at the time `at` (see
    /// [`check_at`](Self::check_at)).
    pub fn check_blocking_at(
        &self,
        subjects: &[Subject<'_>],
        cost: u64,
        at: SystemTime,
    ) -> Result<Permit<'_>, RateLimited> {
        self.check_blocking_pinned(subjects, cost, Some(epoch_us(at)), None)
    }

    #[inline]
    pub(crate) fn check_blocking_pinned(
        &self,
        subjects: &[Subject<'_>],
        cost: u64,
        pinned: Option<u64>,
        tier: Option<&str>,
    ) -> Result<Permit<'_>, RateLimited> {
        let started = metrics::start_timer();
        let mut deciding = self.decide(subjects, cost, pinned, tier);
        let mut step = deciding.start();
        while let Step::Store(fut) = step {
            step = deciding.answer(io::block_on(fut));
        }
        self.metrics().report(deciding.outcome(), started, subjects);
        deciding.decided()
    }
}
