//! A limit as the builder collects it, before validation, and why a limiter could not be built.

use crate::algorithm::Algorithm;
use crate::model::key::PrefixError;
use crate::model::limit_type::LimitType;
use crate::model::rule::{Rule, RuleError};
use std::fmt;
use std::time::Duration;

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
    /// `burst` is zero or larger than [`MAX_COUNT`](crate::model::rule::MAX_COUNT).
    InvalidBurst(u64),
    /// `block` is zero or longer than [`MAX_WINDOW`](crate::model::rule::MAX_WINDOW).
    InvalidBlock(Duration),
    /// `block` was given to a concurrency limit: a penalty follows a refusal by a rule.
    BlockWithoutRules,
    /// `concurrency` is zero or larger than [`MAX_COUNT`](crate::model::rule::MAX_COUNT).
    InvalidConcurrency(u64),
    /// `lease` is zero or longer than [`MAX_WINDOW`](crate::model::rule::MAX_WINDOW).
    InvalidLease(Duration),
    /// `lease` was given to a limit that is not a concurrency limit.
    LeaseWithoutConcurrency,
    /// A limit has both rules and `concurrency`: give each its own limit (stack them).
    ConcurrencyWithRules,
    /// A full bucket of this burst would take longer than
    /// [`MAX_WINDOW`](crate::model::rule::MAX_WINDOW) to drain at a rule's rate (`burst × window /
    /// count`): the burst is out of proportion with the rate.
    BurstTooSlow(u64),
    /// A tier ([`LimiterBuilder::tier`](crate::LimiterBuilder::tier)) has an empty name.
    EmptyTierName,
    /// One limit was given two tiers of this name.
    DuplicateTier(String),
    /// `sync` is shorter than 1ms or longer than the limit's shortest window.
    InvalidSync(Duration),
    /// `sync` was given to a limit with `block` or `concurrency`: penalties and slots are
    /// decided in the store, call by call.
    SyncWithPolicy,
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
            LimiterError::InvalidBurst(b) => write!(f, "`burst` must be between 1 and 1_000_000_000, not {b}"),
            LimiterError::InvalidBlock(d) => write!(f, "`block` must be between 1ms and 366 days, not {d:?}"),
            LimiterError::BlockWithoutRules => {
                f.write_str("`block` applies to a limit with rules (a refusal as exceeded starts it), not to `concurrency`")
            }
            LimiterError::InvalidConcurrency(n) => {
                write!(f, "`concurrency` must be between 1 and 1_000_000_000, not {n}")
            }
            LimiterError::InvalidLease(d) => write!(f, "`lease` must be between 1ms and 366 days, not {d:?}"),
            LimiterError::LeaseWithoutConcurrency => f.write_str("`lease` applies to a `concurrency` limit only"),
            LimiterError::ConcurrencyWithRules => {
                f.write_str("a limit has either rules or `concurrency`: add the concurrency limit as a limit of its own")
            }
            LimiterError::BurstTooSlow(b) => write!(
                f,
                "a bucket of `burst = {b}` would take more than 366 days to drain at its rate (burst × window / count): \
                 lower the burst or raise the count"
            ),
            LimiterError::EmptyTierName => f.write_str("a tier needs a name, e.g. \"pro\""),
            LimiterError::DuplicateTier(t) => write!(f, "the tier {t:?} is given twice for one limit: keep one"),
            LimiterError::InvalidSync(d) => {
                write!(f, "`sync` must be between 1ms and the limit's shortest window, not {d:?}")
            }
            LimiterError::SyncWithPolicy => f.write_str(
                "`sync` applies to a limit with rules only: `block` and `concurrency` are decided in the store call by call",
            ),
        }
    }
}

impl std::error::Error for LimiterError {}

/// A limit as the builder collects it, before validation.
#[derive(Clone)]
pub(crate) struct LimitSpec {
    pub(crate) limit_type: LimitType,
    pub(crate) rules: Vec<Rule>,
    pub(crate) algorithm: Algorithm,
    pub(crate) prefix: String,
    pub(crate) burst: Option<u64>,
    /// Enforce, or shadow (`mode = shadow`); the overrides file may change it.
    pub(crate) mode: crate::model::mode::Mode,
    /// The penalty after a refusal as exceeded (`block = …`).
    pub(crate) block: Option<Duration>,
    /// At most this many calls in flight (`concurrency = N`), instead of rules.
    pub(crate) concurrency: Option<u64>,
    /// How long a slot is held at most (`lease = …`; default [`DEFAULT_LEASE`]).
    pub(crate) lease: Option<Duration>,
    /// Hot-key mode: the longest a process keeps a local reserve (`sync = …`).
    pub(crate) sync: Option<Duration>,
}

/// How long a concurrency slot is held at most when the limit names no `lease`.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(60);

impl LimitSpec {
    /// A spec of `limit_type` with these rules and nothing else.
    pub(crate) fn new(limit_type: LimitType, rules: Vec<Rule>, algorithm: Algorithm, prefix: &str) -> LimitSpec {
        LimitSpec {
            limit_type,
            rules,
            algorithm,
            prefix: prefix.to_owned(),
            burst: None,
            mode: crate::model::mode::Mode::Enforce,
            block: None,
            concurrency: None,
            lease: None,
            sync: None,
        }
    }
}
