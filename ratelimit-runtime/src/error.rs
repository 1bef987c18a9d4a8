//! `RateLimited`, the error of a refused call, and `StoreError`, what went wrong in a store.

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
    /// configuration is fixed. The [`StoreError::Misconfigured`] source says what is wrong.
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
/// # use ratelimit_runtime::{Limiter, LimitType, Rule, Subject, store::MemoryStore};
/// # use std::{sync::Arc, time::Duration};
/// let limiter = Limiter::builder("my_app::update")
///     .limit(LimitType::Ip, [Rule::new(Duration::from_secs(20), 1).unwrap()])
///     .store(Arc::new(MemoryStore::new()))
///     .build()
///     .unwrap();
/// let ip = Subject::ip("203.0.113.7".parse().unwrap());
/// assert!(limiter.check_blocking(&[ip.clone()], 1).is_ok());
/// let err = limiter.check_blocking(&[ip], 1).unwrap_err();
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
    pub(crate) source: Option<Box<StoreError>>,
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
        self.source.as_deref().map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// The error a store call ended with: the store's own error, when there is one.
pub type ErrorSource = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// A store could not decide: what happened, with the store's own error as
/// [`source`](std::error::Error::source). Its text never holds a password.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// No answer within the store's timeout (or the client's own).
    #[error("the rate-limit store did not answer in time{}", after.map(|d| format!(" ({d:?})")).unwrap_or_default())]
    Timeout {
        /// The time limit, when it was this library's.
        after: Option<Duration>,
        /// The client's error, when the client gave up.
        #[source]
        source: Option<ErrorSource>,
    },
    /// The store could not be reached, or the connection broke (refused, reset, no primary).
    #[error("cannot reach the rate-limit store: {}", words(.context, .source))]
    Connection {
        /// Where, or what was tried.
        context: String,
        /// The client's error.
        #[source]
        source: Option<ErrorSource>,
    },
    /// The store refused the credentials (`NOAUTH`, `WRONGPASS`, a missing ACL permission).
    #[error("the rate-limit store refused the credentials: {}", words(.context, .source))]
    Auth {
        /// Where, or what was tried.
        context: String,
        /// The client's error.
        #[source]
        source: Option<ErrorSource>,
    },
    /// The decision script failed on the server.
    #[error("the rate-limit script failed: {}", words(.context, .source))]
    Script {
        /// Where, or what was tried.
        context: String,
        /// The server's error.
        #[source]
        source: Option<ErrorSource>,
    },
    /// The store answered something this library cannot read.
    #[error("unexpected answer from the rate-limit store: {0}")]
    Protocol(String),
    /// The limiter or the store is configured wrongly (an invalid limiter, a malformed URL, a
    /// missing feature): no retry can succeed until the configuration is fixed.
    #[error("misconfigured: {}", words(.context, .source))]
    Misconfigured {
        /// What is wrong, naming the limiter or the store.
        context: String,
        /// The underlying error.
        #[source]
        source: Option<ErrorSource>,
    },
    /// The store was not called: it failed several times in a row, and its circuit breaker
    /// holds calls off for a pause (the failure policy answers them meanwhile).
    #[error("the rate-limit store is not called for {retry_in:?} after repeated failures (circuit open){}", after_colon(.source))]
    CircuitOpen {
        /// How long until one trial call goes to the store again.
        retry_in: Duration,
        /// The failure that opened the breaker, or the last trial's.
        #[source]
        source: Option<ErrorSource>,
    },
    /// Anything else the store or its client reported.
    #[error("rate-limit store error: {}", words(.context, .source))]
    Other {
        /// Where, or what was tried.
        context: String,
        /// The client's error.
        #[source]
        source: Option<ErrorSource>,
    },
}

/// `context: source`, or whichever of the two there is: logs print an error's own text only,
/// so the store's words are part of it.
fn words(context: &str, source: &Option<ErrorSource>) -> String {
    match (context.is_empty(), source) {
        (_, None) => context.to_owned(),
        (true, Some(s)) => s.to_string(),
        (false, Some(s)) => format!("{context}: {s}"),
    }
}

/// `: source`, or nothing.
fn after_colon(source: &Option<ErrorSource>) -> String {
    source.as_ref().map(|s| format!(": {s}")).unwrap_or_default()
}

impl StoreError {
    /// A misconfiguration described by `context` alone.
    pub(crate) fn misconfigured(context: impl Into<String>) -> StoreError {
        StoreError::Misconfigured { context: context.into(), source: None }
    }

    /// A misconfiguration with the error that revealed it.
    pub(crate) fn misconfigured_by(
        context: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> StoreError {
        StoreError::Misconfigured { context: context.into(), source: Some(Arc::new(source)) }
    }

    /// A failure of the library's own machinery (its I/O runtime), not of the store.
    pub(crate) fn other(context: impl Into<String>) -> StoreError {
        StoreError::Other { context: context.into(), source: None }
    }

    /// The same error with `context` in front of its own (a host, a seed node).
    pub(crate) fn within(self, outer: &str) -> StoreError {
        let prefix =
            |context: String| if context.is_empty() { outer.to_owned() } else { format!("{outer}: {context}") };
        match self {
            StoreError::Connection { context, source } => StoreError::Connection { context: prefix(context), source },
            StoreError::Auth { context, source } => StoreError::Auth { context: prefix(context), source },
            StoreError::Script { context, source } => StoreError::Script { context: prefix(context), source },
            StoreError::Misconfigured { context, source } => {
                StoreError::Misconfigured { context: prefix(context), source }
            }
            StoreError::Other { context, source } => StoreError::Other { context: prefix(context), source },
            StoreError::Protocol(what) => StoreError::Protocol(format!("{outer}: {what}")),
            timeout @ StoreError::Timeout { .. } => timeout,
            open @ StoreError::CircuitOpen { .. } => open,
        }
    }
}
