//! [`Limiter`]: limits decided together in one atomic step, built by [`LimiterBuilder`] from
//! [`Limit`](crate::Limit)s; what the attribute expands to, usable by hand. A call is described
//! once ([`Check`], [`Peek`], [`Reset`]) and run awaited or blocking.
//!
//! Inside: `decide` is the one decision path (no I/O in it; `plain` its shortcut for a plain call
//! on the memory store), `sync` the local reserves of synced
//! limits, `snapshot` the limits in force under the overrides file and tiers, `limit_set` the
//! limits one store call decides with their refusal cache (`refusal_cache`), `permit` what an
//! admitted call gives back, `request` and `wait` the requests and their waiting, `registry` the
//! attribute's limiters by name, `logs` what decisions log.

mod answer;
mod builder;
pub(crate) mod decide;
mod decided;
mod enforced_answer;
mod keys;
pub(crate) mod limit_set;
mod logs;
pub(crate) mod overrides;
pub(crate) mod permit;
mod plain;
mod rare;
pub(crate) mod refusal_cache;
pub(crate) mod registry;
pub(crate) mod request;
mod shadow;
pub(crate) mod snapshot;
mod switches;
mod sync;
mod under_override;
mod wait;

use crate::config::{self, FailurePolicy};
use crate::metrics::LimiterMetrics;
use crate::model::compiled::CompiledLimit;
use crate::model::policy::Policy;
use crate::model::subject::Subject;
use crate::store::{MemoryStore, StoreHandle};
pub use builder::LimiterBuilder;
use limit_set::LimitSet;
use request::{Check, Peek, Reset};
use snapshot::{Plan, Snapshot};
use std::fmt;

use std::sync::{Arc, OnceLock};

/// A rate limiter over one or more limits, decided together in one atomic step.
///
/// The attribute builds one per annotated function; build your own to limit by hand:
///
/// ```
/// use ratelimit_runtime::{Limit, Limiter, LimitType, Rule, Subject, store::MemoryStore};
/// use std::{sync::Arc, time::Duration};
///
/// let limiter = Limiter::builder("search")
///     .limit(Limit::new(LimitType::User, [Rule::new(Duration::from_secs(60), 2).unwrap()]))
///     .limit(Limit::new(LimitType::Global, [Rule::new(Duration::from_secs(1), 100).unwrap()]))
///     .store(Arc::new(MemoryStore::new()))
///     .build()
///     .unwrap();
/// let alice = [Subject::bytes(&b"alice"[..]), Subject::global()];
/// assert!(limiter.check(&alice).blocking().is_ok());
/// assert!(limiter.check(&alice).blocking().is_ok());
/// assert!(limiter.check(&alice).blocking().is_err());
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
    /// `store`, when it is the memory store.
    memory: Option<Arc<MemoryStore>>,
    /// The limits in force under the overrides file.
    plan: Plan,
    metrics: LimiterMetrics,
    refusal_cache: Option<bool>,
    /// Whether calls decide with the subjects' runtime overrides (`None`: as the global
    /// configuration says).
    runtime_overrides: Option<bool>,
    /// `runtime_overrides` and `refusal_cache` as resolved (see [`Limiter::switches`]).
    switches: switches::Resolved,
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

impl Limiter {
    /// Starts a limiter named `name` (used in keys, messages and logs).
    pub fn builder(name: impl Into<String>) -> LimiterBuilder {
        LimiterBuilder::new(name.into())
    }

    /// A call of these subjects (one per limit, in the order the limits were added), to decide:
    /// set its cost, tier, time or wait, then `.await` it or run it with
    /// [`.blocking()`](Check::blocking). An allowed call returns a [`Permit`](crate::Permit); a refused one
    /// a [`RateLimited`](crate::RateLimited) that says which rule refused and when to retry.
    ///
    /// ```
    /// use ratelimit_runtime::{Limit, LimitType, Limiter, Rule, Subject, store::MemoryStore};
    /// use std::{sync::Arc, time::Duration};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let exports = Limiter::builder("exports")
    ///     .limit(Limit::new(LimitType::User, [Rule::new(Duration::from_secs(60), 10).unwrap()]))
    ///     .store(Arc::new(MemoryStore::new()))
    ///     .build()
    ///     .unwrap();
    /// let alice = [Subject::bytes(&b"alice"[..])];
    /// exports.check(&alice).await.unwrap();
    /// exports.check(&alice).cost(8).await.unwrap();
    /// let refused = exports.check(&alice).cost(2).blocking().unwrap_err();
    /// assert!(refused.retry_after() > Duration::ZERO);
    /// # }
    /// ```
    #[inline]
    pub fn check<'l, 's, 'a>(&'l self, subjects: &'s [Subject<'a>]) -> Check<'l, 's, 'a> {
        Check::new(self, subjects)
    }

    /// Each rule's remaining quota and reset for these subjects, without consuming anything:
    /// see [`Peek`].
    pub fn peek<'l, 's, 'a>(&'l self, subjects: &'s [Subject<'a>]) -> Peek<'l, 's, 'a> {
        Peek::new(self, subjects)
    }

    /// Forgets the counts of these subjects: see [`Reset`].
    pub fn reset<'l, 's, 'a>(&'l self, subjects: &'s [Subject<'a>]) -> Reset<'l, 's, 'a> {
        Reset::new(self, subjects)
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

    /// Whether the limits as built are in force, known without a snapshot (see
    /// [`Plan::unchanged`]).
    #[inline(always)]
    pub(crate) fn unchanged(&self) -> bool {
        self.inner.plan.unchanged()
    }

    /// The limits in force for a call in `tier`: the tier's, when code or the overrides file
    /// gives it rules; else those of calls without a tier.
    #[inline(always)]
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
        self.inner.on_error.unwrap_or_else(|| config::global::global().on_error)
    }

    /// The store that decides this limiter's calls while its own fails, under
    /// [`FailurePolicy::Local`].
    pub(crate) fn local_store(&self) -> &MemoryStore {
        self.inner.local.get_or_init(|| MemoryStore::new().max_keys(config::global::memory_max_keys()))
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

    /// The store, when it is the memory store (the limiter's own, or the global one).
    #[inline(always)]
    pub(crate) fn memory_store(&self) -> Option<&MemoryStore> {
        match &self.inner.store {
            Some(_) => self.inner.memory.as_deref(),
            None => config::global::global().memory.as_deref(),
        }
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

/// The global store, for a limiter built without its own.
#[inline(never)]
fn global_store() -> &'static StoreHandle {
    &config::global::global().store
}
