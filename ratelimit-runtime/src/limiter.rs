//! `Limiter`: the function-level API the attribute expands to, usable by hand.

use crate::algorithm::Algorithm;
use crate::config::{self, FailurePolicy};
use crate::decision::Decision;
use crate::deny_cache::{self, Owner, Refusal};
use crate::error::{Cause, RateLimited, StoreError};
use crate::io;
use crate::key::DEFAULT_PREFIX;
use crate::limit::{Limit, LimitSpec, LimiterError};
use crate::limit_type::LimitType;
use crate::metrics::{self, LimiterMetrics, Outcome};
use crate::mode::Mode;
use crate::policy::{Headroom, Policy};
use crate::rule::Rule;
use crate::snapshot::{self, Env, Plan, Snapshot};
use crate::store::{Call, Pending, StoreHandle};
use crate::subject::Subject;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Builds a [`Limiter`].
pub struct LimiterBuilder {
    name: String,
    limits: Vec<LimitSpec>,
    on_error: Option<FailurePolicy>,
    store: Option<StoreHandle>,
    error: Option<LimiterError>,
    log_subjects: bool,
    deny_cache: Option<bool>,
}

impl LimiterBuilder {
    /// Adds a limit with the default algorithm and prefix.
    pub fn limit(self, limit_type: LimitType, rules: impl IntoIterator<Item = Rule>) -> Self {
        self.limit_with(limit_type, rules, Algorithm::default(), DEFAULT_PREFIX)
    }

    /// Adds a limit with an explicit algorithm and key prefix.
    pub fn limit_with(
        mut self,
        limit_type: LimitType,
        rules: impl IntoIterator<Item = Rule>,
        algorithm: Algorithm,
        prefix: &str,
    ) -> Self {
        let rules: Vec<Rule> = rules.into_iter().collect();
        self.limits.push(LimitSpec {
            limit_type,
            rules,
            algorithm,
            prefix: prefix.to_owned(),
            burst: None,
            mode: Mode::Enforce,
        });
        self
    }

    /// Adds a limit whose rules are `(window in ms, count)` pairs, remembering the first
    /// invalid rule as the builder's error.
    pub fn limit_ms(self, limit_type: LimitType, rules: &[(u64, u64)], algorithm: Algorithm, prefix: &str) -> Self {
        let mut parsed = Vec::with_capacity(rules.len());
        let mut error = None;
        for &(ms, count) in rules {
            match Rule::from_millis(ms, count) {
                Ok(r) => parsed.push(r),
                Err(e) => error = error.or(Some(LimiterError::Rule(e))),
            }
        }
        let mut this = self.limit_with(limit_type, parsed, algorithm, prefix);
        this.error = this.error.or(error);
        this
    }

    /// Sets the capacity of the last added limit's buckets (token bucket, leaky bucket, GCRA):
    /// up to `burst` units at once, refilled at `count` per window.
    pub fn burst(mut self, burst: u64) -> Self {
        if let Some(last) = self.limits.last_mut() {
            last.burst = Some(burst);
        }
        self
    }

    /// Sets the mode of the last added limit: [`Mode::Shadow`] decides and counts but never
    /// refuses (would-be refusals are logged and counted as `shadow_denied`). The overrides file
    /// may change it.
    pub fn mode(mut self, mode: Mode) -> Self {
        if let Some(last) = self.limits.last_mut() {
            last.mode = mode;
        }
        self
    }

    /// Overrides the global failure policy for this limiter.
    pub fn on_error(mut self, policy: FailurePolicy) -> Self {
        self.on_error = Some(policy);
        self
    }

    /// Uses this store instead of the global one.
    pub fn store(mut self, store: StoreHandle) -> Self {
        self.store = Some(store);
        self
    }

    /// Adds the subjects (client IP, user id) to the limiter's debug events (off by default:
    /// logs then hold personal data). Metrics never carry subjects.
    pub fn log_subjects(mut self, on: bool) -> Self {
        self.log_subjects = on;
        self
    }

    /// Turns the local refusal cache on or off for this limiter, whatever the global
    /// configuration says (see [`Config::deny_cache`](crate::Config::deny_cache); by default on
    /// for remote stores, off in memory).
    pub fn deny_cache(mut self, on: bool) -> Self {
        self.deny_cache = Some(on);
        self
    }

    /// Validates and builds the limiter.
    pub fn build(self) -> Result<Limiter, LimiterError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        if self.limits.is_empty() {
            return Err(LimiterError::NoLimits);
        }
        let plan = Plan::new(self.limits.clone(), self.store.is_none());
        let mut limits = Vec::with_capacity(self.limits.len());
        let mut policies = Vec::new();
        for spec in self.limits {
            let limit = Limit::compile(&self.name, spec, policies.len())?;
            policies.extend(limit.policies());
            limits.push(limit);
        }
        let name: Arc<str> = self.name.into();
        Ok(Limiter {
            inner: Arc::new(Inner {
                metrics: LimiterMetrics::new(name.clone(), self.log_subjects),
                name,
                limits,
                policies: policies.into(),
                on_error: self.on_error,
                store: self.store,
                plan,
                id: deny_cache::next_limiter_id(),
                deny_cache: self.deny_cache,
                ever_refused: AtomicBool::new(false),
            }),
        })
    }
}

/// A rate limiter over one or more limits, decided together in one atomic step.
///
/// The attribute builds one per annotated function; build your own to limit by hand:
///
/// ```
/// use ratelimit_runtime::{Limiter, LimitType, Rule, Subject, store::MemoryStore};
/// use std::{sync::Arc, time::Duration};
///
/// let limiter = Limiter::builder("search")
///     .limit(LimitType::User, [Rule::new(Duration::from_secs(60), 2).unwrap()])
///     .limit(LimitType::Global, [Rule::new(Duration::from_secs(1), 100).unwrap()])
///     .store(Arc::new(MemoryStore::new()))
///     .build()
///     .unwrap();
/// let alice = [Subject::bytes(&b"alice"[..]), Subject::global()];
/// assert!(limiter.check_blocking(&alice, 1).is_ok());
/// assert!(limiter.check_blocking(&alice, 1).is_ok());
/// assert!(limiter.check_blocking(&alice, 1).is_err());
/// ```
#[derive(Clone)]
pub struct Limiter {
    inner: Arc<Inner>,
}

struct Inner {
    name: Arc<str>,
    limits: Vec<Limit>,
    policies: Arc<[Policy]>,
    on_error: Option<FailurePolicy>,
    store: Option<StoreHandle>,
    /// The limits in force under the overrides file (spec §11).
    plan: Plan,
    metrics: LimiterMetrics,
    /// This limiter's identity in the refusal cache.
    id: u64,
    deny_cache: Option<bool>,
    /// Whether the cache ever held a refusal of this limiter (until then, no lookups).
    ever_refused: AtomicBool,
}

/// An allowed call. Borrows its limiter, so that deciding allocates nothing.
#[derive(Clone, Debug)]
pub struct Permit<'a> {
    limiter: &'a Limiter,
    /// `None` when the store failed and the policy let the call through.
    decision: Option<Decision>,
    /// The limits in force it was decided under, when not the limiter's own.
    snapshot: Option<Arc<Snapshot>>,
}

impl Permit<'_> {
    /// The quota left, or `None` when the store failed and the policy let the call through (or
    /// the call was exempt, or only shadow limits decided it).
    pub fn quota(&self) -> Option<Headroom> {
        match &self.snapshot {
            Some(s) => self.decision.and_then(|d| s.quota(&d)),
            None => self.decision.and_then(|d| self.limiter.quota(&d)),
        }
    }
}

impl fmt::Debug for Limiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limiter").field("name", &self.inner.name).field("policies", &self.inner.policies).finish()
    }
}

/// A call prepared for a store: subjects resolved, or the refusal already known.
enum Prepared {
    /// The store's answer to come; with the time the call left when the refusal cache is on.
    Decide(Pending, Option<u64>),
    Refused(RateLimited),
}

/// What the refusal cache needs to remember a refusal: the call and when it left.
struct Sent<'s, 'a> {
    subjects: &'s [Subject<'a>],
    cost: u64,
    at_us: Option<u64>,
    pinned: bool,
}

impl Limiter {
    /// Starts a limiter named `name` (used in keys, messages and logs).
    pub fn builder(name: impl Into<String>) -> LimiterBuilder {
        LimiterBuilder {
            name: name.into(),
            limits: Vec::new(),
            on_error: None,
            store: None,
            error: None,
            log_subjects: false,
            deny_cache: None,
        }
    }

    /// The limiter's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Every enforced rule in force, in limit order (rules longest window first): the
    /// attribute's, or the overrides file's.
    pub fn policies(&self) -> Arc<[Policy]> {
        match self.snapshot() {
            Some(s) => s.policies.clone(),
            None => self.inner.policies.clone(),
        }
    }

    /// The limits in force when the overrides file (or a shadow limit) changes them.
    #[inline]
    pub(crate) fn snapshot(&self) -> Option<Arc<Snapshot>> {
        self.inner.plan.current(&self.inner.name)
    }

    fn env(&self) -> Env<'_> {
        let store = self.store();
        Env {
            name: &self.inner.name,
            store,
            on_error: self.inner.on_error,
            deny_cache: self.deny_cache_on(store),
            metrics: &self.inner.metrics,
        }
    }

    /// Decides a call of `cost` units: `subjects` holds one subject per limit, in the order the
    /// limits were added. Works from any async runtime (Redis connections live on the library's
    /// own I/O runtime).
    pub async fn check(&self, subjects: &[Subject<'_>], cost: u64) -> Result<Permit<'_>, RateLimited> {
        self.check_at(subjects, cost, None).await
    }

    /// As [`check`](Self::check), with the time pinned (µs since the Unix epoch) instead of the
    /// store's clock: deterministic tests, and platforms that forbid `TIME` in scripts.
    pub async fn check_at(
        &self,
        subjects: &[Subject<'_>],
        cost: u64,
        now_us: Option<u64>,
    ) -> Result<Permit<'_>, RateLimited> {
        let started = metrics::start_timer();
        if let Some(s) = self.snapshot() {
            let run = |p: Pending| async move {
                match p {
                    Pending::Ready(r) => r,
                    Pending::Remote(fut) => io::await_remote(fut).await,
                }
            };
            let decided = s.decide(&self.env(), subjects, cost, now_us, run).await;
            return self.snapshot_permit(s, decided, started, subjects);
        }
        let result = match self.prepare(subjects, cost, now_us) {
            Prepared::Refused(e) => Err(e),
            Prepared::Decide(Pending::Ready(r), at_us) => {
                self.conclude(r, Sent { subjects, cost, at_us, pinned: now_us.is_some() })
            }
            Prepared::Decide(Pending::Remote(fut), at_us) => {
                self.conclude(io::await_remote(fut).await, Sent { subjects, cost, at_us, pinned: now_us.is_some() })
            }
        };
        self.inner.metrics.report(outcome_of(&result), started, subjects);
        result
    }

    /// As [`check`](Self::check), blocking the thread: for plain `fn`s. Needs no async runtime
    /// of the caller's.
    pub fn check_blocking(&self, subjects: &[Subject<'_>], cost: u64) -> Result<Permit<'_>, RateLimited> {
        self.check_blocking_at(subjects, cost, None)
    }

    /// As [`check_blocking`](Self::check_blocking) with the time pinned (see
    /// [`check_at`](Self::check_at)).
    #[inline]
    pub fn check_blocking_at(
        &self,
        subjects: &[Subject<'_>],
        cost: u64,
        now_us: Option<u64>,
    ) -> Result<Permit<'_>, RateLimited> {
        let started = metrics::start_timer();
        if let Some(s) = self.snapshot() {
            return self.check_snapshot_blocking(s, subjects, cost, now_us, started);
        }
        let result = match self.prepare(subjects, cost, now_us) {
            Prepared::Refused(e) => Err(e),
            Prepared::Decide(Pending::Ready(r), at_us) => {
                self.conclude(r, Sent { subjects, cost, at_us, pinned: now_us.is_some() })
            }
            Prepared::Decide(Pending::Remote(fut), at_us) => {
                self.conclude(io::block_on(fut), Sent { subjects, cost, at_us, pinned: now_us.is_some() })
            }
        };
        self.inner.metrics.report(outcome_of(&result), started, subjects);
        result
    }

    /// [`check_blocking_at`](Self::check_blocking_at) under the overrides file: kept out of
    /// line so that limiters without one keep their hot path as it was.
    #[cold]
    #[inline(never)]
    fn check_snapshot_blocking(
        &self,
        s: Arc<Snapshot>,
        subjects: &[Subject<'_>],
        cost: u64,
        now_us: Option<u64>,
        started: Option<std::time::Instant>,
    ) -> Result<Permit<'_>, RateLimited> {
        let run = |p: Pending| {
            std::future::ready(match p {
                Pending::Ready(r) => r,
                Pending::Remote(fut) => io::block_on(fut),
            })
        };
        let decided = snapshot::poll_once(s.decide(&self.env(), subjects, cost, now_us, run)).unwrap_or_else(|| {
            Err(self.refusal(LimitType::Global, None, Duration::ZERO, Cause::StoreUnavailable, None))
        });
        self.snapshot_permit(s, decided, started, subjects)
    }

    /// The permit (or refusal) of a decision under the overrides file, counted in metrics.
    fn snapshot_permit(
        &self,
        s: Arc<Snapshot>,
        decided: Result<(Option<Decision>, Outcome), RateLimited>,
        started: Option<std::time::Instant>,
        subjects: &[Subject<'_>],
    ) -> Result<Permit<'_>, RateLimited> {
        match decided {
            Ok((decision, outcome)) => {
                self.inner.metrics.report(outcome, started, subjects);
                Ok(Permit { limiter: self, decision, snapshot: Some(s) })
            }
            Err(e) => {
                let result = Err(e);
                self.inner.metrics.report(outcome_of(&result), started, subjects);
                result
            }
        }
    }

    pub(crate) fn store(&self) -> &StoreHandle {
        match &self.inner.store {
            Some(s) => s,
            None => &config::global().store,
        }
    }

    /// The compiled limits, in the order they were added (peek and reset read them).
    pub(crate) fn limits(&self) -> &[Limit] {
        &self.inner.limits
    }

    /// The rule a store's decision names (the tightest, or the one that denied).
    fn policy_of(&self, d: &Decision) -> Option<Policy> {
        let limit = self.inner.limits.get(d.limit)?;
        self.inner.policies.get(limit.policy_offset() + d.rule).copied()
    }

    fn quota(&self, d: &Decision) -> Option<Headroom> {
        let policy = self.policy_of(d)?;
        Some(Headroom { policy, remaining: d.remaining, reset: d.reset, policies: self.inner.policies.clone() })
    }

    fn prepare(&self, subjects: &[Subject<'_>], cost: u64, now_us: Option<u64>) -> Prepared {
        let limits = &self.inner.limits;
        // Up to four limits' subjects on the stack: most functions have one or two.
        let mut inline: [&[u8]; 4] = [&[]; 4];
        let fits = limits.len() <= inline.len();
        let mut spilled: Vec<&[u8]> = Vec::new();
        for (i, limit) in limits.iter().enumerate() {
            let Some(k) = subjects.get(i).and_then(Subject::key_bytes) else {
                let missing = self.refusal(limit.limit_type, None, Duration::ZERO, Cause::SubjectMissing, None);
                return Prepared::Refused(missing);
            };
            if fits {
                inline[i] = k;
            } else {
                spilled.push(k);
            }
        }
        let keys = if fits { &inline[..limits.len()] } else { &spilled[..] };
        let store = self.store();
        // The local refusal cache (deny_cache.rs): a standing refusal answers without a store call.
        let at_us = self.deny_cache_on(store).then(|| now_us.unwrap_or_else(|| store.now_us()));
        if let Some(now) = at_us.filter(|_| self.inner.ever_refused.load(Ordering::Relaxed)) {
            let at = (now, now_us.is_some());
            if let Some(refusal) = deny_cache::global(deny_cache_size).get(self.owner(store), keys, cost, at) {
                return Prepared::Refused(self.cached_refusal(refusal, now));
            }
        }
        let call = Call { limits, subjects: keys, cost, now_us };
        Prepared::Decide(store.decide(&call), at_us)
    }

    fn conclude(&self, result: Result<Decision, StoreError>, sent: Sent<'_, '_>) -> Result<Permit<'_>, RateLimited> {
        match result {
            Ok(d) if d.allowed => {
                // Only an HTTP request (a context) wants the quota for its headers.
                if let Some(ctx) = crate::context::current() {
                    if let Some(q) = self.quota(&d) {
                        ctx.record_quota(q);
                    }
                }
                Ok(Permit { limiter: self, decision: Some(d), snapshot: None })
            }
            Ok(d) => {
                if let Some(at_us) = sent.at_us {
                    self.remember_refusal(&d, &sent, at_us);
                }
                let limit_type = self.inner.limits.get(d.limit).map_or(LimitType::Global, |l| l.limit_type);
                Err(self.refusal(limit_type, self.policy_of(&d), d.retry_after, Cause::Exceeded, None))
            }
            Err(e) => {
                let policy = self.inner.on_error.unwrap_or_else(|| config::global().on_error);
                let limit_type = self.inner.limits.first().map_or(LimitType::Global, |l| l.limit_type);
                match policy {
                    FailurePolicy::Allow => {
                        config::warn_store_failure(&self.inner.name, &e);
                        Ok(Permit { limiter: self, decision: None, snapshot: None })
                    }
                    FailurePolicy::Deny => {
                        Err(self.refusal(limit_type, None, Duration::from_secs(1), Cause::StoreUnavailable, Some(e)))
                    }
                }
            }
        }
    }

    fn deny_cache_on(&self, store: &StoreHandle) -> bool {
        match self.inner.deny_cache {
            Some(on) => on,
            None => config::deny_cache_settings().0.unwrap_or_else(|| store.is_remote()),
        }
    }

    fn owner(&self, store: &StoreHandle) -> Owner {
        Owner { limiter: self.inner.id, store: Arc::as_ptr(store).cast::<()>() as usize }
    }

    /// Whether a refusal may answer later calls locally. (Shadow-mode limits, whose refusals
    /// let the call through, must answer `false` here.)
    fn deny_cacheable(&self, d: &Decision) -> bool {
        !d.allowed && !d.retry_after.is_zero()
    }

    fn remember_refusal(&self, d: &Decision, sent: &Sent<'_, '_>, at_us: u64) {
        if !self.deny_cacheable(d) {
            return;
        }
        let keys: Option<Vec<&[u8]>> =
            sent.subjects.iter().take(self.inner.limits.len()).map(Subject::key_bytes).collect();
        let Some(keys) = keys else { return };
        let sliding = self.inner.limits.get(d.limit).is_some_and(|l| l.algorithm == Algorithm::SlidingWindow);
        let Some(refusal) = Refusal::of(d, sliding, at_us, sent.cost, sent.pinned) else { return };
        deny_cache::global(deny_cache_size).insert(self.owner(self.store()), &keys, refusal);
        self.inner.ever_refused.store(true, Ordering::Relaxed);
    }

    /// A refusal the cache answered: the remaining retry-after (counted as denied by the
    /// caller, and here as a local denial).
    fn cached_refusal(&self, r: Refusal, now_us: u64) -> RateLimited {
        self.inner.metrics.local_denial();
        let limit = self.inner.limits.get(r.limit);
        let policy = limit.and_then(|l| self.inner.policies.get(l.policy_offset() + r.rule)).copied();
        let limit_type = limit.map_or(LimitType::Global, |l| l.limit_type);
        let retry_after = Duration::from_micros(r.until_us.saturating_sub(now_us));
        self.refusal(limit_type, policy, retry_after, Cause::Exceeded, None)
    }

    /// Forgets the cached refusals of these subjects (one per limit, as in
    /// [`check`](Self::check)) in this process: to be called after their counts are reset.
    /// Other processes keep theirs until their retry-after.
    pub fn forget_refusals(&self, subjects: &[Subject<'_>]) {
        let keys: Option<Vec<&[u8]>> = subjects.iter().take(self.inner.limits.len()).map(Subject::key_bytes).collect();
        if let Some(keys) = keys {
            deny_cache::global(deny_cache_size).forget(self.owner(self.store()), &keys);
        }
    }

    /// Forgets every cached refusal of this limiter in this process.
    pub fn forget_all_refusals(&self) {
        deny_cache::global(deny_cache_size).forget_limiter(self.inner.id);
        // Under the overrides file, the limits in force keep their refusals apart.
        if let Some(s) = self.snapshot() {
            deny_cache::global(deny_cache_size).forget_limiter(s.cache_id);
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
        RateLimited {
            limiter: self.inner.name.clone(),
            policy,
            policies: self.inner.policies.clone(),
            retry_after,
            cause,
            limit_type,
            source,
        }
    }
}

/// The `outcome` label of a decision's result.
fn outcome_of(result: &Result<Permit<'_>, RateLimited>) -> Outcome {
    match result {
        Ok(permit) if permit.decision.is_some() => Outcome::Allowed,
        Ok(_) => Outcome::FailedOpen,
        Err(e) => match e.cause {
            Cause::Exceeded => Outcome::Denied,
            Cause::StoreUnavailable => Outcome::FailedClosed,
            Cause::SubjectMissing => Outcome::SubjectMissing,
        },
    }
}

fn deny_cache_size() -> usize {
    config::deny_cache_settings().1
}

/// A limiter built on first use from a `static` spec: what the attribute expands to.
pub struct LazyLimiter {
    cell: OnceLock<Result<Limiter, LimiterError>>,
    build: fn() -> Result<Limiter, LimiterError>,
}

impl LazyLimiter {
    /// A limiter that `build` makes on first use.
    pub const fn new(build: fn() -> Result<Limiter, LimiterError>) -> LazyLimiter {
        LazyLimiter { cell: OnceLock::new(), build }
    }

    /// The limiter, or the reason it could not be built.
    #[inline]
    pub fn get(&self) -> Result<&Limiter, &LimiterError> {
        self.cell.get_or_init(self.build).as_ref()
    }
}
