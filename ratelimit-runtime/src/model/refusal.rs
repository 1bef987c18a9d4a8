//! [`RateLimited`], the refusal of a call: which limiter and rule refused it, why ([`Cause`]),
//! and when to retry.

use crate::error::{BuildError, StoreError};
use crate::model::limit_type::LimitType;
use crate::model::policy::Policy;
use crate::model::rule::Rule;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Why a call was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Cause {
    /// A rule had no room left.
    Exceeded,
    /// The store could not decide (down, hung, timed out, script error) and the failure policy
    /// is to deny.
    StoreUnavailable,
    /// The identity the limit counts per (IP, user, key) was not available.
    SubjectMissing,
    /// The limiter (or its store) is configured wrongly: no retry can succeed until the
    /// configuration is fixed. The source says what is wrong: a [`BuildError`] (a limiter that
    /// could not be built) or a [`StoreError::Misconfigured`].
    Misconfigured,
    /// The call's cost is larger than a rule's capacity (its count, or the burst of a bucket):
    /// no wait would let it pass, so no retry-after is promised. [`RateLimited::rule`] names the
    /// rule.
    CostTooHigh,
    /// A concurrency limit (`concurrency = N`) already has N calls of this subject in flight.
    /// The retry-after is a hint (a slot frees when a call ends); [`RateLimited::rule`] is
    /// `None`.
    Concurrency,
}

/// The error of a rate-limited call: which limiter and rule refused it, and when to retry.
///
/// ```
/// # use ratelimit_runtime::{Limit, Limiter, LimitType, Rule, Subject, store::MemoryStore};
/// # use std::{sync::Arc, time::Duration};
/// let limiter = Limiter::builder("my_app::update")
///     .limit(Limit::new(LimitType::Ip, [Rule::new(Duration::from_secs(20), 1).unwrap()]))
///     .store(Arc::new(MemoryStore::new()))
///     .build()
///     .unwrap();
/// let ip = Subject::ip("203.0.113.7".parse().unwrap());
/// assert!(limiter.check(&[ip.clone()]).blocking().is_ok());
/// let err = limiter.check(&[ip]).blocking().unwrap_err();
/// assert!(err.to_string().starts_with("rate limited by my_app::update (ip, 1 per 20s); retry after "));
/// assert!(err.retry_after() <= Duration::from_secs(20));
/// ```
#[derive(Clone)]
pub struct RateLimited {
    pub(crate) limiter: Arc<str>,
    pub(crate) policy: Option<Policy>,
    pub(crate) policies: Arc<[Policy]>,
    pub(crate) retry_after: Duration,
    pub(crate) cause: Cause,
    pub(crate) limit_type: LimitType,
    /// Boxed: refusals travel on the hot path, and are kept small.
    pub(crate) source: Option<Box<Failure>>,
}

impl RateLimited {
    /// The limiter's name (by default the function's module path and name).
    pub fn limiter(&self) -> &str {
        &self.limiter
    }

    /// The type of the limit that refused the call.
    pub fn limit_type(&self) -> LimitType {
        self.limit_type
    }

    /// The rule that refused the call (`None` when the store was unavailable or the subject
    /// was missing).
    pub fn rule(&self) -> Option<Rule> {
        self.policy.map(|p| p.rule)
    }

    /// How long to wait before the call can succeed (exact for the sliding window).
    pub fn retry_after(&self) -> Duration {
        self.retry_after
    }

    /// Why the call was refused.
    pub fn cause(&self) -> Cause {
        self.cause
    }

    /// Every rule of the limiter, for `RateLimit-Policy` headers.
    pub fn policies(&self) -> &[Policy] {
        &self.policies
    }

    /// The refusing policy, for the `RateLimit` header.
    pub fn policy(&self) -> Option<Policy> {
        self.policy
    }
}

fn fmt_secs(d: Duration, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let tenths = d.as_millis().div_ceil(100);
    write!(f, "{}.{}s", tenths / 10, tenths % 10)
}

impl fmt::Display for RateLimited {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rate limited by {} ", self.limiter)?;
        match (self.cause, self.policy) {
            (Cause::Exceeded, Some(p)) => write!(f, "({}, {})", p.limit_type, p.rule)?,
            (Cause::SubjectMissing, _) => {
                write!(f, "({}: no {} to count the call for)", self.limit_type, self.limit_type)?
            }
            (Cause::Misconfigured, _) => write!(f, "({}: misconfigured)", self.limit_type)?,
            (Cause::Concurrency, _) => write!(f, "({}: too many calls in flight)", self.limit_type)?,
            (Cause::CostTooHigh, Some(p)) => {
                return write!(f, "({}, {}): the call's cost can never fit; do not retry", p.limit_type, p.rule)
            }
            (_, _) => write!(f, "({}: store unavailable)", self.limit_type)?,
        }
        f.write_str("; retry after ")?;
        fmt_secs(self.retry_after, f)
    }
}

impl fmt::Debug for RateLimited {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimited")
            .field("limiter", &self.limiter)
            .field("limit_type", &self.limit_type)
            .field("rule", &self.rule())
            .field("retry_after", &self.retry_after)
            .field("cause", &self.cause)
            .field("source", &self.source)
            .finish()
    }
}

impl std::error::Error for RateLimited {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self.source.as_deref()? {
            Failure::Store(e) => Some(e),
            Failure::Build(e) => Some(e),
        }
    }
}

/// What a refusal that no rule decided failed with: its `source()`.
#[derive(Clone, Debug)]
pub(crate) enum Failure {
    /// The store failed and the failure policy is to deny.
    Store(StoreError),
    /// The limiter could not be built.
    Build(BuildError),
}
