//! [`LimiterBuilder`]: a limiter's name, its [`Limit`]s, and what the limiter does beside them
//! (its store, failure policy, refusal cache, logs). Each limit carries its own options, so
//! nothing here applies to "the limit added last".

use super::limit_set::LimitSet;
use super::snapshot::Plan;
use super::{Inner, Limiter};
use crate::config::FailurePolicy;
use crate::error::BuildError;
use crate::metrics::LimiterMetrics;
use crate::model::compiled::CompiledLimit;
use crate::model::limit::Limit;
use crate::store::StoreHandle;
use std::sync::{Arc, OnceLock};

/// Builds a [`Limiter`]: [`Limiter::builder`], then [`limit`](Self::limit) for each limit, then
/// [`build`](Self::build).
///
/// ```
/// use ratelimit_runtime::{FailurePolicy, Limit, LimitType, Limiter, Rule, store::MemoryStore};
/// use std::{sync::Arc, time::Duration};
///
/// let login = Limiter::builder("login")
///     .limit(Limit::new(LimitType::Ip, [Rule::new(Duration::from_secs(60), 5).unwrap()]))
///     .limit(Limit::new(LimitType::User, [Rule::new(Duration::from_secs(900), 10).unwrap()]))
///     .on_error(FailurePolicy::Deny)
///     .store(Arc::new(MemoryStore::new()))
///     .build()
///     .unwrap();
/// assert_eq!(login.policies().len(), 2);
/// ```
#[must_use = "a builder does nothing until `build` is called"]
pub struct LimiterBuilder {
    name: String,
    limits: Vec<Limit>,
    on_error: Option<FailurePolicy>,
    store: Option<StoreHandle>,
    log_subjects: bool,
    refusal_cache: Option<bool>,
    runtime_overrides: Option<bool>,
}

impl LimiterBuilder {
    pub(super) fn new(name: String) -> LimiterBuilder {
        LimiterBuilder {
            name,
            limits: Vec::new(),
            on_error: None,
            store: None,
            log_subjects: false,
            refusal_cache: None,
            runtime_overrides: None,
        }
    }

    /// Adds a limit. A call passes one subject per limit, in the order the limits were added.
    pub fn limit(mut self, limit: Limit) -> Self {
        self.limits.push(limit);
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
    /// configuration says (see [`Config::refusal_cache`](crate::Config::refusal_cache); by
    /// default on for remote stores, off in memory).
    pub fn refusal_cache(mut self, on: bool) -> Self {
        self.refusal_cache = Some(on);
        self
    }

    /// Decides each call with its subjects' runtime overrides
    /// ([`Limiter::set_override`](crate::Limiter::set_override)), whatever the global
    /// configuration says (see [`Config::runtime_overrides`](crate::Config::runtime_overrides);
    /// off by default). On Redis this costs one `GET` per limit inside each decision's script,
    /// and takes the limiter's calls off the coalesced batches and the refusal cache.
    pub fn runtime_overrides(mut self, on: bool) -> Self {
        self.runtime_overrides = Some(on);
        self
    }

    /// Validates every limit and builds the limiter.
    pub fn build(self) -> Result<Limiter, BuildError> {
        if self.limits.is_empty() {
            return Err(BuildError::NoLimits);
        }
        let mut tier_limits = Vec::new();
        for spec in &self.limits {
            for (i, (tier, rules)) in spec.tiers.iter().enumerate() {
                if tier.is_empty() {
                    return Err(BuildError::EmptyTierName);
                }
                if spec.tiers[..i].iter().any(|(other, _)| other == tier) {
                    return Err(BuildError::DuplicateTier(tier.clone()));
                }
                // A tier's rules must hold for its limit as the limit's own would.
                let tiered = Limit { rules: rules.clone(), ..spec.clone() };
                tier_limits.push(CompiledLimit::compile(&self.name, tiered, 0)?);
            }
        }
        let plan = Plan::new(self.limits.clone(), self.store.is_none());
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
                memory: self.store.as_ref().and_then(crate::store::memory_of),
                store: self.store,
                plan,
                refusal_cache: self.refusal_cache,
                runtime_overrides: self.runtime_overrides,
                switches: super::switches::Resolved::new(),
                _tier_limits: tier_limits,
                local: OnceLock::new(),
            }),
        })
    }
}
