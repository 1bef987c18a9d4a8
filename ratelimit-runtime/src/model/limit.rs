//! [`Limit`]: one limit of a limiter as its author describes it, before validation. Every option
//! is a method of the limit it applies to, so a limiter reads as a list of whole limits.

use crate::algorithm::Algorithm;
use crate::model::key::DEFAULT_PREFIX;
use crate::model::limit_type::LimitType;
use crate::model::mode::Mode;
use crate::model::rule::Rule;
use std::time::Duration;

/// How long a concurrency slot is held at most when the limit names no [`lease`](Limit::lease).
pub(crate) const DEFAULT_LEASE: Duration = Duration::from_secs(60);

/// One limit of a [`Limiter`](crate::Limiter): whom it counts (its [`LimitType`]), by which
/// rules (or how many calls in flight), and how. The limits of one limiter are decided together,
/// in one atomic step: a call passes only if every limit passes, and a refused call is recorded
/// in none. [`LimiterBuilder::build`](crate::LimiterBuilder::build) validates them.
///
/// ```
/// use ratelimit_runtime::{Algorithm, Limit, LimitType, Limiter, Rule, Subject, store::MemoryStore};
/// use std::{sync::Arc, time::Duration};
///
/// let per_minute = |n| Rule::new(Duration::from_secs(60), n).unwrap();
/// let api = Limiter::builder("api")
///     .limit(Limit::new(LimitType::Ip, [per_minute(100)]).algorithm(Algorithm::Gcra).burst(10))
///     .limit(Limit::new(LimitType::Global, [per_minute(10_000)]))
///     .store(Arc::new(MemoryStore::new()))
///     .build()
///     .unwrap();
/// let call = [Subject::ip("203.0.113.7".parse().unwrap()), Subject::global()];
/// assert!(api.check(&call).blocking().is_ok());
/// ```
#[derive(Clone, Debug)]
pub struct Limit {
    pub(crate) limit_type: LimitType,
    pub(crate) rules: Vec<Rule>,
    pub(crate) algorithm: Algorithm,
    pub(crate) prefix: String,
    pub(crate) burst: Option<u64>,
    /// Enforce, or shadow; the overrides file may change it.
    pub(crate) mode: Mode,
    /// The penalty after a refusal as exceeded.
    pub(crate) block: Option<Duration>,
    /// At most this many calls in flight, instead of rules.
    pub(crate) concurrency: Option<u64>,
    /// How long a slot is held at most (default [`DEFAULT_LEASE`]).
    pub(crate) lease: Option<Duration>,
    /// The longest a process keeps a local reserve of this limit's units.
    pub(crate) sync: Option<Duration>,
    /// Tiers' own rules, by tier name.
    pub(crate) tiers: Vec<(String, Vec<Rule>)>,
}

impl Limit {
    /// A limit counting per `limit_type` by these rules (all of them must pass), with the
    /// default algorithm ([`Algorithm::SlidingWindow`], or [`Algorithm::FixedWindow`] when a
    /// rule is in calendar months: such rules count in fixed windows) and key prefix.
    pub fn new(limit_type: LimitType, rules: impl IntoIterator<Item = Rule>) -> Limit {
        let rules: Vec<Rule> = rules.into_iter().collect();
        let algorithm = match rules.iter().any(|r| r.months().is_some()) {
            true => Algorithm::FixedWindow,
            false => Algorithm::default(),
        };
        Limit {
            limit_type,
            rules,
            algorithm,
            prefix: DEFAULT_PREFIX.to_owned(),
            burst: None,
            mode: Mode::Enforce,
            block: None,
            concurrency: None,
            lease: None,
            sync: None,
            tiers: Vec::new(),
        }
    }

    /// A concurrency limit: at most `max_in_flight` calls of one subject at a time, across every
    /// process sharing the store. A call holds its slot until its [`Permit`](crate::Permit) is
    /// dropped (or ended by the attribute when the function returns); a slot whose process died
    /// is freed after its [`lease`](Self::lease). Refusals have the cause
    /// [`Cause::Concurrency`](crate::Cause::Concurrency).
    ///
    /// ```
    /// use ratelimit_runtime::{Cause, Limit, LimitType, Limiter, Subject, store::MemoryStore};
    /// use std::sync::Arc;
    ///
    /// let reports = Limiter::builder("reports")
    ///     .limit(Limit::concurrency(LimitType::Ip, 2))
    ///     .store(Arc::new(MemoryStore::new()))
    ///     .build()
    ///     .unwrap();
    /// let ip = [Subject::ip("203.0.113.7".parse().unwrap())];
    /// let first = reports.check(&ip).blocking().unwrap();
    /// let _second = reports.check(&ip).blocking().unwrap();
    /// assert_eq!(reports.check(&ip).blocking().unwrap_err().cause(), Cause::Concurrency);
    /// drop(first);
    /// assert!(reports.check(&ip).blocking().is_ok());
    /// ```
    pub fn concurrency(limit_type: LimitType, max_in_flight: u64) -> Limit {
        Limit { concurrency: Some(max_in_flight), ..Limit::new(limit_type, []) }
    }

    /// Counts by this algorithm (default [`Algorithm::SlidingWindow`]; rules in calendar months
    /// count only by [`Algorithm::FixedWindow`]).
    pub fn algorithm(mut self, algorithm: Algorithm) -> Limit {
        self.algorithm = algorithm;
        self
    }

    /// Starts this limit's keys with `prefix` (default [`DEFAULT_PREFIX`](crate::store::DEFAULT_PREFIX)).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Limit {
        self.prefix = prefix.into();
        self
    }

    /// The capacity of the buckets ([`Algorithm::TokenBucket`], [`Algorithm::LeakyBucket`],
    /// [`Algorithm::Gcra`]): up to `burst` units at once, refilled at `count` per window.
    pub fn burst(mut self, burst: u64) -> Limit {
        self.burst = Some(burst);
        self
    }

    /// [`Mode::Shadow`] decides and counts but never refuses (would-be refusals are logged and
    /// counted as `shadow_denied`). The overrides file may change it.
    pub fn mode(mut self, mode: Mode) -> Limit {
        self.mode = mode;
        self
    }

    /// A penalty: when this limit refuses a call as exceeded, the subject is refused by it for
    /// `block` from that refusal, in every process sharing the store (the block lives in the
    /// store and starts in the same round trip). Calls refused during the block do not extend
    /// it; their retry-after is the rest of the block. Like a rule's window, `block` has
    /// millisecond resolution (sub-millisecond parts are dropped).
    ///
    /// ```
    /// use ratelimit_runtime::{Limit, LimitType, Limiter, Rule, Subject, store::MemoryStore};
    /// use std::{sync::Arc, time::Duration};
    ///
    /// let logins = Limiter::builder("login")
    ///     .limit(Limit::new(LimitType::Ip, [Rule::new(Duration::from_secs(60), 5).unwrap()]).block(Duration::from_secs(120)))
    ///     .store(Arc::new(MemoryStore::new()))
    ///     .build()
    ///     .unwrap();
    /// let ip = [Subject::ip("203.0.113.7".parse().unwrap())];
    /// for _ in 0..5 {
    ///     logins.check(&ip).blocking().unwrap();
    /// }
    /// let refused = logins.check(&ip).blocking().unwrap_err();
    /// assert_eq!(refused.retry_after(), Duration::from_secs(120));
    /// ```
    pub fn block(mut self, block: Duration) -> Limit {
        self.block = Some(block);
        self
    }

    /// Syncs this limit with the store every `interval` instead of on every call (for a hot key:
    /// a global limit, one big tenant). Each process hands out the limit's units from a local
    /// reserve, filled from the store in one batch when it runs out and kept at most `interval`
    /// (from 1ms to the limit's shortest window). One store call per batch instead of one per
    /// call lets a single subject go far past what one store can decide. The price is
    /// exactness: over any span, `P` processes admit at most `P × cap` units more than the exact
    /// limit, where `cap` is what the tightest rule earns in one interval (`count × interval /
    /// window`, at least 1), and may refuse up to as many units early (reserved by one process,
    /// unused by it). Refunds do not give back a synced limit's units. Not for limits with
    /// `block` or `concurrency`.
    ///
    /// ```
    /// use ratelimit_runtime::{Limit, LimitType, Limiter, Rule, Subject, store::MemoryStore};
    /// use std::{sync::Arc, time::Duration};
    ///
    /// let api = Limiter::builder("api")
    ///     .limit(
    ///         Limit::new(LimitType::Global, [Rule::new(Duration::from_secs(1), 100_000).unwrap()])
    ///             .sync(Duration::from_millis(100)),
    ///     )
    ///     .store(Arc::new(MemoryStore::new()))
    ///     .build()
    ///     .unwrap();
    /// assert!(api.check(&[Subject::global()]).blocking().is_ok());
    /// ```
    pub fn sync(mut self, interval: Duration) -> Limit {
        self.sync = Some(interval);
        self
    }

    /// How long a slot of this [concurrency limit](Self::concurrency) is held at most (default
    /// 60 s): the slots of a process that died without freeing them are free after it. Longer
    /// than the slowest call, or a call still running loses its slot to another.
    pub fn lease(mut self, lease: Duration) -> Limit {
        self.lease = Some(lease);
        self
    }

    /// Gives tier `name` its own rules for this limit: calls made in this tier (the request's
    /// [`tier`](crate::request::Check::tier)) are decided by these rules, calls in other tiers or
    /// without one by the limit's. The rules are part of the limit's keys, so a subject moving
    /// to another tier starts fresh counts there (and finds its old ones if it moves back within
    /// the window). An overrides file's `[[limit]]` with `tier = "…"` replaces these rules.
    ///
    /// ```
    /// use ratelimit_runtime::{Limit, LimitType, Limiter, Rule, Subject, store::MemoryStore};
    /// use std::{sync::Arc, time::Duration};
    ///
    /// let per_10s = |n| Rule::new(Duration::from_secs(10), n).unwrap();
    /// let search = Limiter::builder("search")
    ///     .limit(Limit::new(LimitType::User, [per_10s(5)]).tier("pro", [per_10s(50)]))
    ///     .store(Arc::new(MemoryStore::new()))
    ///     .build()
    ///     .unwrap();
    /// let alice = [Subject::bytes(&b"alice"[..])];
    /// let free = (0..60).filter(|_| search.check(&alice).blocking().is_ok()).count();
    /// let pro = (0..60).filter(|_| search.check(&alice).tier("pro").blocking().is_ok()).count();
    /// assert_eq!((free, pro), (5, 50));
    /// // A tier nobody configured is decided by the limit's own rules.
    /// assert!(search.check(&alice).tier("gold").blocking().is_err());
    /// ```
    pub fn tier(mut self, name: impl Into<String>, rules: impl IntoIterator<Item = Rule>) -> Limit {
        self.tiers.push((name.into(), rules.into_iter().collect()));
        self
    }
}
