//! The limits in force for one limiter under one generation of the overrides file: which limits
//! are enforced, which only watched (shadow), which off, with the file's rules compiled in, and
//! the exemptions. Rebuilt lazily when the generation changes; a decision holds one snapshot
//! from start to end, so it never sees half a reload.
//!
//! A limiter with no override, no exemption and no `mode = shadow` takes none of this: its hot
//! path costs one atomic load ([`Plan::current`] answers `None`).

use crate::config::{self, FailurePolicy, Throttle};
use crate::deny_cache::{self, Owner, Refusal};
use crate::limit::{Limit, LimitSpec};
use crate::metrics::{self, LimiterMetrics, Outcome};
use crate::mode::Mode;
use crate::overrides::{self, Overrides, Table, UNSET};
use crate::policy::{Policy, Quota};
use crate::store::{Call, Pending, StoreHandle};
use crate::{context, Algorithm, Cause, Decision, LimitType, RateLimited, StoreError, Subject};
use arc_swap::ArcSwapOption;
use std::fmt;
use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a limiter keeps to build its snapshots: its limits as built, and the latest snapshot.
pub(crate) struct Plan {
    specs: Vec<LimitSpec>,
    /// Some limit is not enforced by the attribute itself (`mode = shadow`).
    moded: bool,
    /// Decides with the global store (whose configuration brings the overrides file).
    global_store: bool,
    cell: ArcSwapOption<Snapshot>,
}

impl Plan {
    pub(crate) fn new(specs: Vec<LimitSpec>, global_store: bool) -> Plan {
        let moded = specs.iter().any(|s| s.mode != Mode::Enforce);
        Plan { specs, moded, global_store, cell: ArcSwapOption::const_empty() }
    }

    /// The snapshot to decide with, or `None` when the limits as built are in force unchanged.
    #[inline]
    pub(crate) fn current(&self, name: &str) -> Option<Arc<Snapshot>> {
        let generation = overrides::generation();
        // Before any global configuration, a limiter with its own store has no overrides.
        if (generation == 0 || (generation == UNSET && !self.global_store)) && !self.moded {
            return None;
        }
        self.slow(name, generation)
    }

    #[cold]
    fn slow(&self, name: &str, mut generation: u64) -> Option<Arc<Snapshot>> {
        if generation == UNSET {
            if self.global_store {
                // The global configuration (and its overrides file) is built on first use.
                let _ = config::global();
            }
            generation = match overrides::generation() {
                UNSET => 0,
                g => g,
            };
            if generation == 0 && !self.moded {
                return None;
            }
        }
        if let Some(s) = &*self.cell.load() {
            if s.generation == generation {
                return (!s.passthrough).then(|| Arc::clone(s));
            }
        }
        let table = if generation == 0 { None } else { overrides::table() };
        let built = Arc::new(self.build(name, table));
        self.cell.store(Some(Arc::clone(&built)));
        (!built.passthrough).then_some(built)
    }

    fn build(&self, name: &str, table: Option<Arc<Table>>) -> Snapshot {
        let file = table.as_deref().map(|t| &t.overrides);
        if file.is_some() {
            overrides::seen(name);
        }
        let mut touched = false;
        let mut enforced = Vec::new();
        let mut shadow = Vec::new();
        for (i, base) in self.specs.iter().enumerate() {
            let mut spec = base.clone();
            if let Some(o) = file.and_then(|f| f.find(name, spec.limit_type)) {
                touched = true;
                if let Some(rules) = &o.rules {
                    spec.rules = rules.clone();
                }
                if let Some(mode) = o.mode {
                    spec.mode = mode;
                }
            }
            match spec.mode {
                Mode::Enforce => enforced.push((i, spec)),
                Mode::Shadow => shadow.push((i, spec)),
                Mode::Off => {}
            }
        }
        if let Some(f) = file {
            for o in f.limits().iter().filter(|o| o.limiter == name) {
                if !self.specs.iter().any(|s| s.limit_type == o.limit_type) {
                    tracing::warn!(
                        limiter = name,
                        r#type = %o.limit_type,
                        "ratelimit: the configuration overrides a limit this limiter does not have"
                    );
                }
            }
        }
        let exempt = table.clone().filter(|t| t.overrides.has_exemptions());
        let (enforced, policies) = self.compile(name, enforced);
        let (shadow, shadow_policies) = self.compile(name, shadow);
        Snapshot {
            generation: table.as_ref().map_or(0, |t| t.generation),
            cache_id: deny_cache::next_limiter_id(),
            passthrough: !touched && !self.moded && exempt.is_none(),
            types: self.specs.iter().map(|s| s.limit_type).collect(),
            enforced,
            shadow,
            policies,
            shadow_policies,
            exempt,
        }
    }

    /// Compiles one part; a limit whose overridden rules do not compile keeps the attribute's.
    fn compile(&self, name: &str, specs: Vec<(usize, LimitSpec)>) -> (Part, Arc<[Policy]>) {
        let mut part = Part { limits: Vec::with_capacity(specs.len()), index: Vec::with_capacity(specs.len()) };
        let mut policies = Vec::new();
        for (i, spec) in specs {
            let mode = spec.mode;
            let limit = Limit::compile(name, spec, policies.len()).or_else(|e| {
                tracing::error!(limiter = name, error = %e, "ratelimit: the configured rules do not apply; keeping the attribute's");
                Limit::compile(name, LimitSpec { mode, ..self.specs[i].clone() }, policies.len())
            });
            if let Ok(limit) = limit {
                policies.extend(limit.policies());
                part.limits.push(limit);
                part.index.push(i);
            }
        }
        (part, policies.into())
    }
}

/// Some of a limiter's limits, decided together in one store call.
struct Part {
    limits: Vec<Limit>,
    /// Each limit's position among the limiter's limits (its subject's index).
    index: Vec<usize>,
}

impl Part {
    /// The subjects' key bytes, or the position of the first missing one.
    fn keys<'s>(&self, subjects: &'s [Subject<'_>]) -> Result<Vec<&'s [u8]>, usize> {
        self.index.iter().map(|&i| subjects.get(i).and_then(Subject::key_bytes).ok_or(i)).collect()
    }
}

/// The limits of one limiter in force under one generation of the overrides file.
pub(crate) struct Snapshot {
    generation: u64,
    /// This generation's identity in the refusal cache: refusals under other rules never
    /// answer for these.
    pub(crate) cache_id: u64,
    /// Nothing differs from the limits as built.
    passthrough: bool,
    /// The type of each of the limiter's limits, as built.
    types: Vec<LimitType>,
    enforced: Part,
    shadow: Part,
    /// The enforced rules, for `RateLimit-Policy` and errors.
    pub(crate) policies: Arc<[Policy]>,
    shadow_policies: Arc<[Policy]>,
    /// The table, when it exempts anyone.
    exempt: Option<Arc<Table>>,
}

impl fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Snapshot")
            .field("generation", &self.generation)
            .field("policies", &self.policies)
            .field("shadow", &self.shadow_policies)
            .finish()
    }
}

/// What the snapshot needs of its limiter.
pub(crate) struct Env<'a> {
    pub(crate) name: &'a Arc<str>,
    pub(crate) store: &'a StoreHandle,
    pub(crate) on_error: Option<FailurePolicy>,
    /// Whether the local refusal cache answers for the limiter on this store.
    pub(crate) deny_cache: bool,
    pub(crate) metrics: &'a LimiterMetrics,
}

impl Snapshot {
    /// The limits in force, for peek and reset: the enforced part, then the shadow part, each
    /// limit with the position of its subject among the limiter's limits.
    pub(crate) fn parts(&self) -> [(&[Limit], &[usize]); 2] {
        [(&self.enforced.limits, &self.enforced.index), (&self.shadow.limits, &self.shadow.index)]
    }

    /// The quota an allowed enforced decision leaves.
    pub(crate) fn quota(&self, d: &Decision) -> Option<Quota> {
        let policy = policy_of(&self.enforced, &self.policies, d)?;
        Some(Quota { policy, remaining: d.remaining, reset: d.reset, policies: self.policies.clone() })
    }

    /// Decides a call: exempt subjects pass uncounted; the enforced limits decide (and may
    /// refuse); then the shadow limits decide, and their refusals are only logged and counted.
    /// `run` finishes a store call (awaiting it, or blocking on it). `Ok((Some(decision), _))` is
    /// the enforced limits' decision, `Ok((None, _))` an allowed call with none; the outcome is
    /// what metrics count (allowed, exempt, or failed open).
    pub(crate) async fn decide<F, Fut>(
        &self,
        env: &Env<'_>,
        subjects: &[Subject<'_>],
        cost: u64,
        now_us: Option<u64>,
        run: F,
    ) -> Result<(Option<Decision>, Outcome), RateLimited>
    where
        F: Fn(Pending) -> Fut,
        Fut: Future<Output = Result<Decision, StoreError>>,
    {
        if let Some(table) = &self.exempt {
            if self.is_exempt(&table.overrides, subjects) {
                return Ok((None, Outcome::Exempt));
            }
        }
        let mut allowed = None;
        let mut outcome = Outcome::Allowed;
        if !self.enforced.limits.is_empty() {
            let keys = match self.enforced.keys(subjects) {
                Ok(keys) => keys,
                Err(i) => {
                    let limit_type = self.types.get(i).copied().unwrap_or(LimitType::Global);
                    return Err(self.refusal(env, limit_type, None, Duration::ZERO, Cause::SubjectMissing, None));
                }
            };
            let call = Call { limits: &self.enforced.limits, subjects: &keys, cost, now_us };
            // The local refusal cache, as in `Limiter::prepare`, for the enforced limits only
            // (shadow refusals let calls through: they are never cached).
            let owner = Owner { limiter: self.cache_id, store: Arc::as_ptr(env.store).cast::<()>() as usize };
            let at_us = env.deny_cache.then(|| now_us.unwrap_or_else(|| env.store.now_us()));
            if let Some(now) = at_us {
                let cache = deny_cache::global(|| config::deny_cache_settings().1);
                if let Some(r) = cache.get(owner, &keys, cost, (now, now_us.is_some())) {
                    env.metrics.local_denial();
                    let limit = self.enforced.limits.get(r.limit);
                    let limit_type = limit.map_or(LimitType::Global, |l| l.limit_type);
                    let policy = limit.and_then(|l| self.policies.get(l.policy_offset() + r.rule)).copied();
                    let retry_after = Duration::from_micros(r.until_us.saturating_sub(now));
                    return Err(self.refusal(env, limit_type, policy, retry_after, Cause::Exceeded, None));
                }
            }
            match run(env.store.decide(&call)).await {
                Ok(d) if d.allowed => {
                    if let Some(ctx) = context::current() {
                        if let Some(q) = self.quota(&d) {
                            ctx.record_quota(q);
                        }
                    }
                    allowed = Some(d);
                }
                Ok(d) => {
                    if let Some(at) = at_us {
                        let sliding =
                            self.enforced.limits.get(d.limit).is_some_and(|l| l.algorithm == Algorithm::SlidingWindow);
                        if let Some(r) = Refusal::of(&d, sliding, at, cost, now_us.is_some()) {
                            deny_cache::global(|| config::deny_cache_settings().1).insert(owner, &keys, r);
                        }
                    }
                    let limit_type = self.enforced.limits.get(d.limit).map_or(LimitType::Global, |l| l.limit_type);
                    let policy = policy_of(&self.enforced, &self.policies, &d);
                    return Err(self.refusal(env, limit_type, policy, d.retry_after, Cause::Exceeded, None));
                }
                Err(e) => match env.on_error.unwrap_or_else(|| config::global().on_error) {
                    FailurePolicy::Allow => {
                        outcome = Outcome::FailedOpen;
                        config::warn_store_failure(env.name, &e)
                    }
                    FailurePolicy::Deny => {
                        let limit_type = self.enforced.limits.first().map_or(LimitType::Global, |l| l.limit_type);
                        let source = Some(e);
                        return Err(self.refusal(
                            env,
                            limit_type,
                            None,
                            Duration::from_secs(1),
                            Cause::StoreUnavailable,
                            source,
                        ));
                    }
                },
            }
        }
        if !self.shadow.limits.is_empty() {
            match self.shadow.keys(subjects) {
                Ok(keys) => {
                    let call = Call { limits: &self.shadow.limits, subjects: &keys, cost, now_us };
                    match run(env.store.decide(&call)).await {
                        Ok(d) if !d.allowed => {
                            let policy = policy_of(&self.shadow, &self.shadow_policies, &d);
                            shadow_refusal(env.name, policy, d.retry_after);
                        }
                        Ok(_) => {}
                        // Shadow limits never refuse, whatever the failure policy.
                        Err(e) => config::warn_store_failure(env.name, &e),
                    }
                }
                Err(_) => shadow_refusal(env.name, None, Duration::ZERO),
            }
        }
        Ok((allowed, outcome))
    }

    fn is_exempt(&self, o: &Overrides, subjects: &[Subject<'_>]) -> bool {
        if let Some(ctx) = context::current() {
            if ctx.ip().is_some_and(|ip| o.is_exempt_ip(ip))
                || ctx.user().is_some_and(|u| o.is_exempt_user(u.as_bytes()))
            {
                return true;
            }
        }
        self.types.iter().zip(subjects).any(|(t, s)| match (t, s.as_bytes()) {
            (LimitType::Ip, Some(b)) => ip_of_subject(b).is_some_and(|ip| o.is_exempt_ip(ip)),
            (LimitType::User, Some(b)) => o.is_exempt_user(b),
            _ => false,
        })
    }

    fn refusal(
        &self,
        env: &Env<'_>,
        limit_type: LimitType,
        policy: Option<Policy>,
        retry_after: Duration,
        cause: Cause,
        source: Option<StoreError>,
    ) -> RateLimited {
        RateLimited {
            limiter: env.name.clone(),
            policy,
            policies: self.policies.clone(),
            retry_after,
            cause,
            limit_type,
            source,
        }
    }
}

fn policy_of(part: &Part, policies: &[Policy], d: &Decision) -> Option<Policy> {
    let limit = part.limits.get(d.limit)?;
    policies.get(limit.policy_offset() + d.rule).copied()
}

/// The address an IP subject stands for: `203.0.113.7`, or the network of `2001:db8::/64`.
fn ip_of_subject(bytes: &[u8]) -> Option<IpAddr> {
    crate::subject::ip_group_of_key(bytes).map(|group| group.addr())
}

/// A call a shadow limit would have refused: counted, and logged at most once per 10 s.
fn shadow_refusal(limiter: &str, policy: Option<Policy>, retry_after: Duration) {
    static THROTTLE: Throttle = Throttle::new(Duration::from_secs(10));
    metrics::decision(limiter, Outcome::ShadowDenied);
    if let Some(suppressed) = THROTTLE.admit(Instant::now()) {
        let rule = policy.map_or_else(|| "subject missing".to_owned(), |p| format!("{}, {}", p.limit_type, p.rule));
        tracing::info!(
            limiter,
            rule = %rule,
            retry_after_ms = retry_after.as_millis() as u64,
            suppressed,
            "ratelimit: shadow mode: a call would have been refused; letting it through"
        );
    }
}

/// Polls a future once: the blocking flavour of [`Snapshot::decide`], whose store calls
/// complete synchronously, is done after one poll. `None` if it was not (never expected).
pub(crate) fn poll_once<F: Future>(fut: F) -> Option<F::Output> {
    let fut = std::pin::pin!(fut);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match fut.poll(&mut cx) {
        std::task::Poll::Ready(out) => Some(out),
        std::task::Poll::Pending => None,
    }
}
