//! `Limiter`: the function-level API the attribute expands to, usable by hand.

use crate::config::{self, FailurePolicy};
use crate::key::{check_prefix, KeyTemplate, PrefixError, DEFAULT_PREFIX};
use crate::store::{Call, Pending, StoreHandle};
use crate::{io, Algorithm, Cause, Decision, LimitType, RateLimited, Rule, RuleError, StoreError, Subject};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// One rule of one limit, as headers name it: `ip-20s`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// What the limit counts per.
    pub limit_type: LimitType,
    /// The rule.
    pub rule: Rule,
}

impl Policy {
    /// The policy's name in `RateLimit-Policy` / `RateLimit` headers: `<type>-<window>`.
    pub fn name(&self) -> String {
        format!("{}-{}", self.limit_type, self.rule.window_label())
    }
}

/// One limit of a limiter (one `#[rate_limiter]` attribute): a type, an algorithm and rules
/// that share one log per subject.
#[derive(Debug)]
pub(crate) struct Limit {
    pub(crate) limit_type: LimitType,
    pub(crate) algorithm: Algorithm,
    /// Capacity other than `count` (token/leaky bucket, GCRA).
    pub(crate) burst: Option<u64>,
    /// Sorted by window, longest first (the script trims by the first).
    pub(crate) rules: Vec<Rule>,
    template: KeyTemplate,
    /// Where this limit's policies start in the limiter's policy list.
    policy_offset: usize,
    /// The script's arguments for this limit: algorithm, rule count, (window µs, count)*.
    pub(crate) script_args: Vec<Vec<u8>>,
    /// Distinguishes this limit's logs in the in-memory store without building a Redis key.
    memory_id: u64,
}

impl Limit {
    pub(crate) fn longest_us(&self) -> u64 {
        self.rules.first().map_or(0, |r| r.window_us())
    }

    pub(crate) fn redis_key(&self, subject: &[u8]) -> Vec<u8> {
        self.template.key(subject)
    }

    /// Appends this limit's in-memory key for `subject`: its id, then the subject's bytes.
    pub(crate) fn write_memory_key(&self, subject: &[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(&self.memory_id.to_le_bytes());
        out.extend_from_slice(subject);
    }
}

/// The in-memory store's short name for a limit's key template: limits with the same identity
/// (prefix, name, type, algorithm, rules), like the same Redis keys, share their state.
fn memory_id(template: &KeyTemplate) -> u64 {
    static IDS: Mutex<Option<HashMap<Vec<u8>, u64>>> = Mutex::new(None);
    let mut ids = IDS.lock().unwrap_or_else(|e| e.into_inner());
    let ids = ids.get_or_insert_with(HashMap::new);
    let next = ids.len() as u64 + 1;
    *ids.entry(template.identity()).or_insert(next)
}

/// Why a limiter could not be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LimiterError {
    /// A limit has no rules.
    NoRules,
    /// A rule is invalid.
    Rule(RuleError),
    /// Two rules of one limit have the same window.
    DuplicateWindow(Duration),
    /// The key prefix is invalid.
    Prefix(PrefixError),
    /// The limiter has no limit at all.
    NoLimits,
    /// `burst` was given for an algorithm without a capacity (only token bucket, leaky bucket
    /// and GCRA have one).
    BurstUnsupported(Algorithm),
    /// `burst` is zero or larger than [`MAX_COUNT`](crate::MAX_COUNT).
    InvalidBurst(u64),
}

impl fmt::Display for LimiterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LimiterError::NoRules => f.write_str("a limit needs at least one rule"),
            LimiterError::Rule(e) => e.fmt(f),
            LimiterError::DuplicateWindow(w) => write!(f, "two rules of one limit have the same window ({w:?})"),
            LimiterError::Prefix(e) => e.fmt(f),
            LimiterError::NoLimits => f.write_str("a limiter needs at least one limit"),
            LimiterError::BurstUnsupported(a) => {
                write!(f, "`burst` applies to TokenBucket, LeakyBucket and Gcra, not {a:?}")
            }
            LimiterError::InvalidBurst(b) => write!(f, "`burst` must be between 1 and 2^53 - 1, not {b}"),
        }
    }
}

impl std::error::Error for LimiterError {}

struct LimitSpec {
    limit_type: LimitType,
    rules: Vec<Rule>,
    algorithm: Algorithm,
    prefix: String,
    burst: Option<u64>,
}

/// Builds a [`Limiter`].
pub struct LimiterBuilder {
    name: String,
    limits: Vec<LimitSpec>,
    on_error: Option<FailurePolicy>,
    store: Option<StoreHandle>,
    error: Option<LimiterError>,
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
        self.limits.push(LimitSpec { limit_type, rules, algorithm, prefix: prefix.to_owned(), burst: None });
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

    /// Validates and builds the limiter.
    pub fn build(self) -> Result<Limiter, LimiterError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        if self.limits.is_empty() {
            return Err(LimiterError::NoLimits);
        }
        let mut limits = Vec::with_capacity(self.limits.len());
        let mut policies = Vec::new();
        for spec in self.limits {
            check_prefix(&spec.prefix).map_err(LimiterError::Prefix)?;
            let mut rules = spec.rules;
            if rules.is_empty() {
                return Err(LimiterError::NoRules);
            }
            rules.sort_by(|a, b| b.window_ms().cmp(&a.window_ms()).then(a.count().cmp(&b.count())));
            if let Some(pair) = rules.windows(2).find(|p| p[0].window_ms() == p[1].window_ms()) {
                return Err(LimiterError::DuplicateWindow(pair[0].window()));
            }
            if let Some(burst) = spec.burst {
                if !spec.algorithm.supports_burst() {
                    return Err(LimiterError::BurstUnsupported(spec.algorithm));
                }
                if burst == 0 || burst > crate::MAX_COUNT {
                    return Err(LimiterError::InvalidBurst(burst));
                }
            }
            let mut script_args = vec![
                spec.algorithm.code().as_bytes().to_vec(),
                rules.len().to_string().into_bytes(),
                spec.burst.unwrap_or(0).to_string().into_bytes(),
            ];
            for rule in &rules {
                script_args.push(rule.window_us().to_string().into_bytes());
                script_args.push(rule.count().to_string().into_bytes());
            }
            let policy_offset = policies.len();
            policies.extend(rules.iter().map(|&rule| Policy { limit_type: spec.limit_type, rule }));
            let template =
                KeyTemplate::new(&spec.prefix, &self.name, spec.limit_type, spec.algorithm, spec.burst, &rules);
            limits.push(Limit {
                limit_type: spec.limit_type,
                algorithm: spec.algorithm,
                burst: spec.burst,
                rules,
                policy_offset,
                script_args,
                memory_id: memory_id(&template),
                template,
            });
        }
        Ok(Limiter {
            inner: Arc::new(Inner {
                name: self.name.into(),
                limits,
                policies: policies.into(),
                on_error: self.on_error,
                store: self.store,
            }),
        })
    }
}

/// A rate limiter over one or more limits, decided together in one atomic step.
///
/// The attribute builds one per annotated function; build your own to limit by hand:
///
/// ```
/// use ratelimit_runtime::{Limiter, LimitType, Rule, Subject, MemoryStore};
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
}

/// The quota left after an allowed call, for `RateLimit` headers.
#[derive(Clone, Debug)]
pub struct Quota {
    /// The tightest rule (least remaining).
    pub policy: Policy,
    /// Units left in it.
    pub remaining: u64,
    /// How long until its quota is whole again if no other call comes.
    pub reset: Duration,
    /// Every rule of the limiter.
    pub policies: Arc<[Policy]>,
}

/// An allowed call. Borrows its limiter, so that deciding allocates nothing.
#[derive(Clone, Debug)]
pub struct Permit<'a> {
    limiter: &'a Limiter,
    /// `None` when the store failed and the policy let the call through.
    decision: Option<Decision>,
}

impl Permit<'_> {
    /// The quota left, or `None` when the store failed and the policy let the call through.
    pub fn quota(&self) -> Option<Quota> {
        self.decision.and_then(|d| self.limiter.quota(&d))
    }
}

impl fmt::Debug for Limiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limiter").field("name", &self.inner.name).field("policies", &self.inner.policies).finish()
    }
}

/// A call prepared for a store: subjects resolved, or the refusal already known.
enum Prepared {
    Decide(Pending),
    Refused(RateLimited),
}

impl Limiter {
    /// Starts a limiter named `name` (used in keys, messages and logs).
    pub fn builder(name: impl Into<String>) -> LimiterBuilder {
        LimiterBuilder { name: name.into(), limits: Vec::new(), on_error: None, store: None, error: None }
    }

    /// The limiter's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Every rule of every limit, in limit order (rules longest window first).
    pub fn policies(&self) -> &[Policy] {
        &self.inner.policies
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
        match self.prepare(subjects, cost, now_us) {
            Prepared::Refused(e) => Err(e),
            Prepared::Decide(Pending::Ready(r)) => self.conclude(r),
            Prepared::Decide(Pending::Remote(fut)) => self.conclude(io::await_remote(fut).await),
        }
    }

    /// As [`check`](Self::check), blocking the thread: for plain `fn`s. Needs no async runtime
    /// of the caller's.
    pub fn check_blocking(&self, subjects: &[Subject<'_>], cost: u64) -> Result<Permit<'_>, RateLimited> {
        self.check_blocking_at(subjects, cost, None)
    }

    /// As [`check_blocking`](Self::check_blocking) with the time pinned (see
    /// [`check_at`](Self::check_at)).
    pub fn check_blocking_at(
        &self,
        subjects: &[Subject<'_>],
        cost: u64,
        now_us: Option<u64>,
    ) -> Result<Permit<'_>, RateLimited> {
        match self.prepare(subjects, cost, now_us) {
            Prepared::Refused(e) => Err(e),
            Prepared::Decide(Pending::Ready(r)) => self.conclude(r),
            Prepared::Decide(Pending::Remote(fut)) => self.conclude(io::block_on(fut)),
        }
    }

    fn store(&self) -> &StoreHandle {
        match &self.inner.store {
            Some(s) => s,
            None => &config::global().store,
        }
    }

    /// The rule a store's decision names (the tightest, or the one that denied).
    fn policy_of(&self, d: &Decision) -> Option<Policy> {
        let limit = self.inner.limits.get(d.limit)?;
        self.inner.policies.get(limit.policy_offset + d.rule).copied()
    }

    fn quota(&self, d: &Decision) -> Option<Quota> {
        let policy = self.policy_of(d)?;
        Some(Quota { policy, remaining: d.remaining, reset: d.reset, policies: self.inner.policies.clone() })
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
        let call = Call { limits, subjects: keys, cost, now_us };
        Prepared::Decide(self.store().decide(&call))
    }

    fn conclude(&self, result: Result<Decision, StoreError>) -> Result<Permit<'_>, RateLimited> {
        match result {
            Ok(d) if d.allowed => {
                // Only an HTTP request (a context) wants the quota for its headers.
                if let Some(ctx) = crate::context::current() {
                    if let Some(q) = self.quota(&d) {
                        ctx.record_quota(q);
                    }
                }
                Ok(Permit { limiter: self, decision: Some(d) })
            }
            Ok(d) => {
                let limit_type = self.inner.limits.get(d.limit).map_or(LimitType::Global, |l| l.limit_type);
                Err(self.refusal(limit_type, self.policy_of(&d), d.retry_after, Cause::Exceeded, None))
            }
            Err(e) => {
                let policy = self.inner.on_error.unwrap_or_else(|| config::global().on_error);
                let limit_type = self.inner.limits.first().map_or(LimitType::Global, |l| l.limit_type);
                match policy {
                    FailurePolicy::Allow => {
                        config::warn_store_failure(&self.inner.name, &e);
                        Ok(Permit { limiter: self, decision: None })
                    }
                    FailurePolicy::Deny => {
                        Err(self.refusal(limit_type, None, Duration::from_secs(1), Cause::StoreUnavailable, Some(e)))
                    }
                }
            }
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
