//! `Limiter`: the function-level API the attribute expands to, usable by hand.

mod admin;
pub(crate) mod decide;
pub(crate) mod limit_set;
pub(crate) mod permit;
pub(crate) mod refusal_cache;
pub(crate) mod registry;
pub(crate) mod reserve;
pub(crate) mod snapshot;
mod wait;

use crate::algorithm::Algorithm;
use crate::config::{self, FailurePolicy};
use crate::limiter::limit_set::LimitSet;
use crate::limiter::snapshot::{CodeTier, Plan, Snapshot};
use crate::metrics::LimiterMetrics;
use crate::model::compiled::CompiledLimit;
use crate::model::key::DEFAULT_PREFIX;
use crate::model::limit::{LimitSpec, LimiterError};
use crate::model::limit_type::LimitType;
use crate::model::mode::Mode;
use crate::model::policy::Policy;
use crate::model::rule::Rule;
use crate::model::subject::Subject;
use crate::store::{MemoryStore, StoreHandle};
use std::fmt;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Builds a [`Limiter`].
pub struct LimiterBuilder {
    name: String,
    limits: Vec<LimitSpec>,
    on_error: Option<FailurePolicy>,
    store: Option<StoreHandle>,
    error: Option<LimiterError>,
    log_subjects: bool,
    refusal_cache: Option<bool>,
    tiers: Vec<CodeTier>,
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
        self.limits.push(LimitSpec::new(limit_type, rules, algorithm, prefix));
        self
    }

    /// Adds a concurrency limit: at most `max_in_flight` calls of one subject at a time, across
    /// every process sharing the store. A call holds its slot until its [`Permit`](crate::Permit) is dropped (or
    /// ended by the attribute when the function returns); a slot whose process died is freed
    /// after its lease ([`lease`](Self::lease), 60 s by default). Refusals have the cause
    /// [`Cause::Concurrency`](crate::Cause::Concurrency).
    ///
    /// ```
    /// use ratelimit_runtime::{Cause, Limiter, LimitType, Subject, store::MemoryStore};
    /// use std::sync::Arc;
    ///
    /// let reports = Limiter::builder("reports")
    ///     .concurrency(LimitType::Ip, 2)
    ///     .store(Arc::new(MemoryStore::new()))
    ///     .build()
    ///     .unwrap();
    /// let ip = [Subject::ip("203.0.113.7".parse().unwrap())];
    /// let first = reports.check_blocking(&ip, 1).unwrap();
    /// let _second = reports.check_blocking(&ip, 1).unwrap();
    /// assert_eq!(reports.check_blocking(&ip, 1).unwrap_err().cause(), Cause::Concurrency);
    /// drop(first);
    /// assert!(reports.check_blocking(&ip, 1).is_ok());
    /// ```
    pub fn concurrency(self, limit_type: LimitType, max_in_flight: u64) -> Self {
        self.concurrency_with(limit_type, max_in_flight, DEFAULT_PREFIX)
    }

    /// As [`concurrency`](Self::concurrency), with an explicit key prefix.
    pub fn concurrency_with(mut self, limit_type: LimitType, max_in_flight: u64, prefix: &str) -> Self {
        let mut spec = LimitSpec::new(limit_type, Vec::new(), Algorithm::default(), prefix);
        spec.concurrency = Some(max_in_flight);
        self.limits.push(spec);
        self
    }

    /// Sets how long a slot of the last added concurrency limit is held at most (default
    /// 60 s): the slots of a process that died without freeing them are free after it. Longer
    /// than the slowest call, or a call still running loses its slot to another.
    pub fn lease(mut self, lease: Duration) -> Self {
        if let Some(last) = self.limits.last_mut() {
            last.lease = Some(lease);
        }
        self
    }

    /// Sets a penalty on the last added limit: when it refuses a call as exceeded, the subject
    /// is refused by this limit for `block` from that refusal, in every process sharing the
    /// store (the block lives in the store and starts in the same round trip). Calls refused
    /// during the block do not extend it; their retry-after is the rest of the block. Like a
    /// rule's window, `block` has millisecond resolution (sub-millisecond parts are dropped).
    ///
    /// ```
    /// use ratelimit_runtime::{Limiter, LimitType, Rule, Subject, store::MemoryStore};
    /// use std::{sync::Arc, time::Duration};
    ///
    /// let logins = Limiter::builder("login")
    ///     .limit(LimitType::Ip, [Rule::new(Duration::from_secs(60), 5).unwrap()])
    ///     .block(Duration::from_secs(120))
    ///     .store(Arc::new(MemoryStore::new()))
    ///     .build()
    ///     .unwrap();
    /// let ip = [Subject::ip("203.0.113.7".parse().unwrap())];
    /// for _ in 0..5 {
    ///     logins.check_blocking(&ip, 1).unwrap();
    /// }
    /// let refused = logins.check_blocking(&ip, 1).unwrap_err();
    /// assert_eq!(refused.retry_after(), Duration::from_secs(120));
    /// ```
    pub fn block(mut self, block: Duration) -> Self {
        if let Some(last) = self.limits.last_mut() {
            last.block = Some(block);
        }
        self
    }

    /// Puts the last added limit in hot-key mode: each process hands out its units from a local
    /// reserve, filled from the store in one batch when it runs out and kept at most `interval`
    /// (from 1ms to the limit's shortest window). One store call per batch instead of one per
    /// call lets a single subject (a global limit, one big tenant) go far past what one store
    /// can decide. The price is exactness: over any span, `P` processes admit at most
    /// `P × cap` units more than the exact limit, where `cap` is what the tightest rule earns in
    /// one interval (`count × interval / window`, at least 1), and may refuse up to as many
    /// units early (reserved by one process, unused by it). Refunds do not give back a `sync`
    /// limit's units. Not for limits with `block` or `concurrency`.
    ///
    /// ```
    /// use ratelimit_runtime::{Limiter, LimitType, Rule, Subject, store::MemoryStore};
    /// use std::{sync::Arc, time::Duration};
    ///
    /// let api = Limiter::builder("api")
    ///     .limit(LimitType::Global, [Rule::new(Duration::from_secs(1), 100_000).unwrap()])
    ///     .sync(Duration::from_millis(100))
    ///     .store(Arc::new(MemoryStore::new()))
    ///     .build()
    ///     .unwrap();
    /// assert!(api.check_blocking(&[Subject::global()], 1).is_ok());
    /// ```
    pub fn sync(mut self, interval: Duration) -> Self {
        if let Some(last) = self.limits.last_mut() {
            last.sync = Some(interval);
        }
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

    /// Gives tier `name` its own rules for the last added limit (as [`burst`](Self::burst) and
    /// [`mode`](Self::mode) do): calls made in this tier
    /// ([`check_tier`](Limiter::check_tier)) are decided by these rules, calls in other tiers or
    /// without one by the limit's. The rules are part of the limit's keys, so a subject moving
    /// to another tier starts fresh counts there (and finds its old ones if it moves back within
    /// the window). An overrides file's `[[limit]]` with `tier = "…"` replaces these rules.
    ///
    /// ```
    /// use ratelimit_runtime::{Limiter, LimitType, Rule, Subject, store::MemoryStore};
    /// use std::{sync::Arc, time::Duration};
    ///
    /// let per_10s = |n| Rule::new(Duration::from_secs(10), n).unwrap();
    /// let search = Limiter::builder("search")
    ///     .limit(LimitType::User, [per_10s(5)])
    ///     .tier("pro", [per_10s(50)])
    ///     .store(Arc::new(MemoryStore::new()))
    ///     .build()
    ///     .unwrap();
    /// let alice = [Subject::bytes(&b"alice"[..])];
    /// let free = (0..60).filter(|_| search.check_blocking(&alice, 1).is_ok()).count();
    /// let pro = (0..60).filter(|_| search.check_tier_blocking(&alice, 1, "pro").is_ok()).count();
    /// assert_eq!((free, pro), (5, 50));
    /// // A tier nobody configured is decided by the limit's own rules.
    /// assert!(search.check_tier_blocking(&alice, 1, "gold").is_err());
    /// ```
    pub fn tier(mut self, name: impl Into<String>, rules: impl IntoIterator<Item = Rule>) -> Self {
        if let Some(limit) = self.limits.len().checked_sub(1) {
            self.tiers.push(CodeTier { limit, name: name.into(), rules: rules.into_iter().collect() });
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
    pub fn refusal_cache(mut self, on: bool) -> Self {
        self.refusal_cache = Some(on);
        self
    }

    /// The former name of [`refusal_cache`](Self::refusal_cache).
    #[deprecated(note = "renamed `refusal_cache`")]
    pub fn deny_cache(self, on: bool) -> Self {
        self.refusal_cache(on)
    }

    /// Validates and builds the limiter.
    pub fn build(self) -> Result<Limiter, LimiterError> {
        let name = self.name.clone();
        self.try_build().inspect_err(|_| FAILED.with(|f| *f.borrow_mut() = Some(name)))
    }

    fn try_build(self) -> Result<Limiter, LimiterError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        if self.limits.is_empty() {
            return Err(LimiterError::NoLimits);
        }
        let mut tier_limits = Vec::with_capacity(self.tiers.len());
        for (i, tier) in self.tiers.iter().enumerate() {
            if tier.name.is_empty() {
                return Err(LimiterError::EmptyTierName);
            }
            if self.tiers[..i].iter().any(|t| t.limit == tier.limit && t.name == tier.name) {
                return Err(LimiterError::DuplicateTier(tier.name.clone()));
            }
            // A tier's rules must hold for its limit as the limit's own would.
            if let Some(spec) = self.limits.get(tier.limit) {
                let rules = tier.rules.clone();
                tier_limits.push(CompiledLimit::compile(&self.name, LimitSpec { rules, ..spec.clone() }, 0)?);
            }
        }
        let plan = Plan::new(self.limits.clone(), self.tiers, self.store.is_none());
        let mut limits = Vec::with_capacity(self.limits.len());
        let mut policies = Vec::new();
        for spec in self.limits {
            let limit = CompiledLimit::compile(&self.name, spec, policies.len())?;
            policies.extend(limit.policies());
            limits.push(limit);
        }
        let name: Arc<str> = self.name.into();
        Ok(Limiter {
            inner: Arc::new(Inner {
                metrics: LimiterMetrics::new(name.clone(), self.log_subjects),
                name,
                own: LimitSet::new(limits, None, policies.into()),
                on_error: self.on_error,
                store: self.store,
                plan,
                refusal_cache: self.refusal_cache,
                refusal_cache_resolved: AtomicU8::new(0),
                _tier_limits: tier_limits,
                local: OnceLock::new(),
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
    /// The limits as built.
    own: LimitSet,
    on_error: Option<FailurePolicy>,
    store: Option<StoreHandle>,
    /// The limits in force under the overrides file.
    plan: Plan,
    metrics: LimiterMetrics,
    refusal_cache: Option<bool>,
    /// `refusal_cache` as resolved from the configuration when not set (see
    /// [`Limiter::refusal_cache_on`]): 0 not yet, 1/2 off/on while there is no global
    /// configuration yet (it may still say otherwise), 3/4 off/on for good.
    refusal_cache_resolved: AtomicU8,
    /// The tiers given in code, compiled: held, as `own` is, so that the memory store finds a
    /// tier's counts again when a reload puts its rules back in force (as Redis does, by key).
    _tier_limits: Vec<CompiledLimit>,
    /// Where calls are decided while the store fails, under [`FailurePolicy::Local`]: made on
    /// the first failure, kept after (its counts expire as any memory store's).
    local: OnceLock<MemoryStore>,
}

impl fmt::Debug for Limiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limiter").field("name", &self.inner.name).field("policies", &self.inner.own.policies).finish()
    }
}

/// µs since the Unix epoch of a pinned time (0 before the epoch).
pub(crate) fn epoch_us(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
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
            refusal_cache: None,
            tiers: Vec::new(),
        }
    }

    /// The limiter's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    pub(crate) fn name_arc(&self) -> Arc<str> {
        self.inner.name.clone()
    }

    /// Every enforced rule in force, in limit order (rules longest window first): the
    /// attribute's, or the overrides file's.
    pub fn policies(&self) -> Arc<[Policy]> {
        match self.snapshot() {
            Some(s) => s.enforced.policies.clone(),
            None => self.inner.own.policies.clone(),
        }
    }

    /// The limits in force when the overrides file (or a shadow limit) changes them.
    #[inline]
    pub(crate) fn snapshot(&self) -> Option<Arc<Snapshot>> {
        self.inner.plan.current(&self.inner.name)
    }

    /// The limits in force for a call in `tier`: the tier's, when code or the overrides file
    /// gives it rules; else those of calls without a tier.
    #[inline]
    pub(crate) fn snapshot_for(&self, tier: Option<&str>) -> Option<Arc<Snapshot>> {
        let snapshot = self.snapshot()?;
        match tier.and_then(|t| snapshot.tier(t)) {
            Some(tiered) => Some(Arc::clone(tiered)),
            None => Some(snapshot),
        }
    }

    /// The limits as built.
    #[inline]
    pub(crate) fn own(&self) -> &LimitSet {
        &self.inner.own
    }

    /// The enforced limits under `snapshot` (the overrides file's or a tier's), else the limits
    /// as built.
    #[inline]
    pub(crate) fn enforced<'s>(&'s self, snapshot: Option<&'s Snapshot>) -> &'s LimitSet {
        snapshot.map_or(self.own(), |s| &s.enforced)
    }

    pub(crate) fn metrics(&self) -> &LimiterMetrics {
        &self.inner.metrics
    }

    /// This limiter's failure policy: its own, or the global one.
    pub(crate) fn failure_policy(&self) -> FailurePolicy {
        self.inner.on_error.unwrap_or_else(|| config::global().on_error)
    }

    /// The store that decides this limiter's calls while its own fails, under
    /// [`FailurePolicy::Local`].
    pub(crate) fn local_store(&self) -> &MemoryStore {
        self.inner.local.get_or_init(MemoryStore::new)
    }

    /// Inlined (every decision asks, several times): a call for a field read cost more than
    /// the read.
    #[inline]
    pub(crate) fn store(&self) -> &StoreHandle {
        match &self.inner.store {
            Some(s) => s,
            None => global_store(),
        }
    }

    /// Whether the local refusal cache answers for this limiter on `store`.
    #[inline]
    pub(crate) fn refusal_cache_on(&self, store: &StoreHandle) -> bool {
        if let Some(on) = self.inner.refusal_cache {
            return on;
        }
        // Resolved once: the answer changes only when the global configuration is first set
        // (until then the environment's switch stands in for it), and a limiter's store never.
        match self.inner.refusal_cache_resolved.load(Ordering::Relaxed) {
            4 => true,
            3 => false,
            n @ (1 | 2) if !config::is_set() => n == 2,
            _ => self.resolve_refusal_cache(store),
        }
    }

    #[cold]
    #[inline(never)]
    fn resolve_refusal_cache(&self, store: &StoreHandle) -> bool {
        // Read first: a configuration set after this look is seen on a later call.
        let for_good = config::is_set();
        let on = config::deny_cache_settings().0.unwrap_or_else(|| store.is_remote(crate::store::INTERNAL));
        self.inner.refusal_cache_resolved.store(u8::from(on) + 1 + if for_good { 2 } else { 0 }, Ordering::Relaxed);
        on
    }

    /// Forgets the cached refusals of these subjects (one per limit, as in
    /// [`check`](Self::check)) in this process: to be called after their counts are reset.
    /// Other processes keep theirs until their retry-after.
    pub fn forget_refusals(&self, subjects: &[Subject<'_>]) {
        self.inner.own.forget(self.store(), subjects);
        if let Some(s) = self.snapshot() {
            s.enforced.forget(self.store(), subjects);
            for tier in s.tiers() {
                tier.enforced.forget(self.store(), subjects);
            }
        }
    }

    /// Forgets every cached refusal of this limiter in this process.
    pub fn forget_all_refusals(&self) {
        refusal_cache::global().forget_owner(self.inner.own.cache_id);
        // Under the overrides file, the limits in force keep their refusals apart.
        if let Some(s) = self.snapshot() {
            refusal_cache::global().forget_owner(s.enforced.cache_id);
            for tier in s.tiers() {
                refusal_cache::global().forget_owner(tier.enforced.cache_id);
            }
        }
    }
}

thread_local! {
    /// The name of the limiter this thread failed to build last: a [`LazyLimiter`] reads it
    /// right after its build function fails, so that its refusals name the limiter without the
    /// generated code passing the name twice.
    static FAILED: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// A limiter built on first use from a `static` spec: what the attribute expands to.
pub struct LazyLimiter {
    cell: OnceLock<Result<Limiter, (Option<String>, LimiterError)>>,
    build: fn() -> Result<Limiter, LimiterError>,
}

impl LazyLimiter {
    /// A limiter that `build` makes on first use.
    pub const fn new(build: fn() -> Result<Limiter, LimiterError>) -> LazyLimiter {
        LazyLimiter { cell: OnceLock::new(), build }
    }

    fn built(&self) -> &Result<Limiter, (Option<String>, LimiterError)> {
        self.cell.get_or_init(|| {
            FAILED.with(|f| f.borrow_mut().take());
            (self.build)().map_err(|e| (FAILED.with(|f| f.borrow_mut().take()), e))
        })
    }

    /// The limiter, or the reason it could not be built.
    #[inline]
    pub fn get(&self) -> Result<&Limiter, &LimiterError> {
        self.built().as_ref().map_err(|(_, e)| e)
    }

    /// The limiter's name, once its build function ran (also when the limiter is invalid).
    pub fn name(&self) -> Option<&str> {
        match self.built() {
            Ok(l) => Some(l.name()),
            Err((name, _)) => name.as_deref(),
        }
    }
}

/// The global store, for a limiter built without its own.
#[inline(never)]
fn global_store() -> &'static StoreHandle {
    &config::global().store
}
