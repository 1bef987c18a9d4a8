//! Every error the library returns, but the refusal itself ([`RateLimited`](crate::RateLimited),
//! which reports a decision rather than a failure): what a store failed with, why a rule, a
//! prefix, a network, a limiter or a configuration was refused, and why a value did not parse.
//! Each keeps the error that caused it as its `source()`, and none holds a password.
//!
//! They sit below everything else (the model builds its values with them), so they name no
//! type of the model but the algorithm a limit chose.

use crate::algorithm::Algorithm;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

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
    /// The store is configured wrongly (a malformed URL, a missing feature): no retry can succeed
    /// until the configuration is fixed.
    #[error("misconfigured: {}", words(.context, .source))]
    Misconfigured {
        /// What is wrong, naming the store.
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

/// Why a [`Rule`](crate::Rule) could not be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RuleError {
    /// The window is shorter than one millisecond.
    #[error("the window must be at least 1ms")]
    ZeroWindow,
    /// The window is longer than [`MAX_WINDOW`](crate::rule::MAX_WINDOW).
    #[error("the window must be at most 366 days")]
    WindowTooLong,
    /// The count is zero: such a rule would deny every call.
    #[error("the count must be at least 1")]
    ZeroCount,
    /// The count is larger than [`MAX_COUNT`](crate::rule::MAX_COUNT).
    #[error("the count must be at most 1_000_000_000")]
    CountTooLarge,
}

/// Why a key prefix was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PrefixError {
    /// Longer than [`MAX_PREFIX_LEN`](crate::store::MAX_PREFIX_LEN) bytes.
    #[error("the key prefix must be at most 64 bytes")]
    TooLong,
    /// Contains `{` or `}`, which would move the Redis Cluster hash tag.
    #[error("the key prefix may not contain `{{` or `}}` (they would move the Redis Cluster hash tag)")]
    Brace,
}

/// Why a network (`10.0.0.0/8`, `2001:db8::/32`, `192.0.2.1`) could not be read. Each variant
/// holds the text as given.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CidrError {
    /// The text was empty.
    #[error("invalid CIDR {input:?}: empty (expected e.g. 10.0.0.0/8, 2001:db8::/32 or 192.0.2.1)")]
    Empty {
        /// The text.
        input: String,
    },
    /// The part before `/` is not an IPv4 or IPv6 address.
    #[error("invalid CIDR {input:?}: not an IP address before the `/` (expected e.g. 10.0.0.0/8 or 2001:db8::/32)")]
    Address {
        /// The text.
        input: String,
    },
    /// The part after `/` is not a number.
    #[error("invalid CIDR {input:?}: the prefix length after `/` must be a number (e.g. /8, /64)")]
    Prefix {
        /// The text.
        input: String,
    },
    /// The prefix is longer than the address (32 bits for IPv4, 128 for IPv6).
    #[error("invalid CIDR {input:?}: the prefix length must be at most {max} for this address family")]
    PrefixTooLong {
        /// The text.
        input: String,
        /// The longest prefix for this address family.
        max: u8,
    },
    /// The address has bits set after the prefix (`10.0.0.1/8`): `addr/prefix` is the network
    /// the text probably meant.
    #[error("invalid CIDR {input:?}: bits set after the /{prefix} prefix (did you mean {addr}/{prefix}?)")]
    HostBits {
        /// The text.
        input: String,
        /// The network's address.
        addr: IpAddr,
        /// Its prefix length.
        prefix: u8,
    },
}

/// Why a limiter could not be built ([`LimiterBuilder::build`](crate::LimiterBuilder::build)).
/// The attribute checks all of this at compile time.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// A limit has no rules.
    #[error("a limit needs at least one rule")]
    NoRules,
    /// A rule is invalid.
    #[error(transparent)]
    Rule(#[from] RuleError),
    /// Two rules of one limit have the same window.
    #[error("two rules of one limit have the same window ({0:?})")]
    DuplicateWindow(Duration),
    /// The key prefix is invalid.
    #[error(transparent)]
    Prefix(#[from] PrefixError),
    /// The limiter has no limit at all.
    #[error("a limiter needs at least one limit")]
    NoLimits,
    /// `burst` was given for an algorithm without a capacity (only token bucket, leaky bucket
    /// and GCRA have one).
    #[error("`burst` applies to TokenBucket, LeakyBucket and Gcra, not {0:?}")]
    BurstUnsupported(Algorithm),
    /// `burst` is zero or larger than [`MAX_COUNT`](crate::rule::MAX_COUNT).
    #[error("`burst` must be between 1 and 1_000_000_000, not {0}")]
    InvalidBurst(u64),
    /// A full bucket of this burst would take longer than
    /// [`MAX_WINDOW`](crate::rule::MAX_WINDOW) to drain at a rule's rate (`burst × window /
    /// count`): the burst is out of proportion with the rate.
    #[error(
        "a bucket of `burst = {0}` would take more than 366 days to drain at its rate (burst × window / count): \
         lower the burst or raise the count"
    )]
    BurstTooSlow(u64),
    /// `block` is zero or longer than [`MAX_WINDOW`](crate::rule::MAX_WINDOW).
    #[error("`block` must be between 1ms and 366 days, not {0:?}")]
    InvalidBlock(Duration),
    /// `block` was given to a concurrency limit: a penalty follows a refusal by a rule.
    #[error("`block` applies to a limit with rules (a refusal as exceeded starts it), not to `concurrency`")]
    BlockWithoutRules,
    /// `concurrency` is zero or larger than [`MAX_COUNT`](crate::rule::MAX_COUNT).
    #[error("`concurrency` must be between 1 and 1_000_000_000, not {0}")]
    InvalidConcurrency(u64),
    /// `lease` is zero or longer than [`MAX_WINDOW`](crate::rule::MAX_WINDOW).
    #[error("`lease` must be between 1ms and 366 days, not {0:?}")]
    InvalidLease(Duration),
    /// `lease` was given to a limit that is not a concurrency limit.
    #[error("`lease` applies to a `concurrency` limit only")]
    LeaseWithoutConcurrency,
    /// A limit has both rules and `concurrency`: give each its own limit (stack them).
    #[error("a limit has either rules or `concurrency`: add the concurrency limit as a limit of its own")]
    ConcurrencyWithRules,
    /// `sync` is shorter than 1ms or longer than the limit's shortest window.
    #[error("`sync` must be between 1ms and the limit's shortest window, not {0:?}")]
    InvalidSync(Duration),
    /// `sync` was given to a limit with `block` or `concurrency`: penalties and slots are
    /// decided in the store, call by call.
    #[error(
        "`sync` applies to a limit with rules only: `block` and `concurrency` are decided in the store call by call"
    )]
    SyncWithBlockOrConcurrency,
    /// A tier ([`Limit::tier`](crate::Limit::tier)) has an empty name.
    #[error("a tier needs a name, e.g. \"pro\"")]
    EmptyTierName,
    /// One limit was given two tiers of this name.
    #[error("the tier {0:?} is given twice for one limit: keep one")]
    DuplicateTier(String),
}

/// Why a value did not parse: a [`FailurePolicy`](crate::FailurePolicy), a [`Mode`](crate::Mode),
/// an on/off switch, a number of entries.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    /// Not one of the names this value takes.
    #[error("unknown {what} {value:?}: expected {expected}")]
    Unknown {
        /// What was read (`failure policy`, `mode`, `switch`).
        what: &'static str,
        /// The text, as given.
        value: String,
        /// The names it takes.
        expected: &'static str,
    },
    /// Not a whole number.
    #[error("{value:?} is not a whole number")]
    Number {
        /// The text, as given.
        value: String,
        /// Why.
        #[source]
        source: std::num::ParseIntError,
    },
}

/// Why an overrides file (`RATELIMIT_CONFIG`) was refused: the file, and where in it and what is
/// wrong. Displays as `overrides.toml:3:9: unknown type "ipp": expected …`.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OverridesError {
    /// The file could not be read.
    #[error("{file}: cannot read the rate-limit configuration: {source}")]
    Read {
        /// The file, as given.
        file: String,
        /// Why.
        #[source]
        source: Arc<std::io::Error>,
    },
    /// The file does not say what this library can apply.
    #[error("{}{message}{}", place(.file, *.line, *.column), shown(.value, .message))]
    Invalid {
        /// The file, as given.
        file: String,
        /// The line (1-based; 0 when the problem is the file as a whole).
        line: usize,
        /// The column (1-based, in characters).
        column: usize,
        /// The offending value as written, when there is one.
        value: Option<String>,
        /// What is wrong.
        message: String,
    },
    /// [`reload`](crate::reload) was called but no file was configured.
    #[error("no rate-limit configuration file: set RATELIMIT_CONFIG or Config::overrides_file")]
    NoFile,
}

/// `file:line:column: `, or `file: ` when the problem is the file as a whole.
fn place(file: &str, line: usize, column: usize) -> String {
    if line == 0 {
        format!("{file}: ")
    } else {
        format!("{file}:{line}:{column}: ")
    }
}

/// ` (value: v)` when the message does not show the value already.
fn shown(value: &Option<String>, message: &str) -> String {
    match value {
        Some(v) if !message.contains(v.as_str()) => format!(" (value: {v})"),
        _ => String::new(),
    }
}

impl OverridesError {
    /// The file, as given (empty for [`NoFile`](Self::NoFile)).
    pub fn file(&self) -> &str {
        match self {
            OverridesError::Read { file, .. } | OverridesError::Invalid { file, .. } => file,
            OverridesError::NoFile => "",
        }
    }

    /// The line (1-based; 0 when the problem is not at a line).
    pub fn line(&self) -> usize {
        match self {
            OverridesError::Invalid { line, .. } => *line,
            _ => 0,
        }
    }

    /// The column (1-based, in characters; 0 when the problem is not at a line).
    pub fn column(&self) -> usize {
        match self {
            OverridesError::Invalid { column, .. } => *column,
            _ => 0,
        }
    }

    /// What is wrong, without the place.
    pub fn message(&self) -> &str {
        match self {
            OverridesError::Invalid { message, .. } => message,
            OverridesError::Read { .. } => "cannot read the rate-limit configuration",
            OverridesError::NoFile => "no rate-limit configuration file",
        }
    }

    /// The offending value as written, when there is one.
    pub fn value(&self) -> Option<&str> {
        match self {
            OverridesError::Invalid { value, .. } => value.as_deref(),
            _ => None,
        }
    }
}

/// A configuration ([`Config`](crate::Config), the environment, [`init`](crate::init)) could not
/// be applied.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// An environment variable holds a value this library cannot use.
    #[error("{var}={value:?}: {source}")]
    Var {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// Why it did not parse.
        #[source]
        source: ParseError,
    },
    /// A variable is set without the one it goes with.
    #[error("{set} is set without {missing}{}", hint_for(.missing))]
    MissingVar {
        /// The variable that is set.
        set: &'static str,
        /// The one missing.
        missing: &'static str,
    },
    /// More than one store is named (`REDIS_URL`, `REDIS_CLUSTER_URLS`, `REDIS_SENTINEL_URLS`):
    /// no silent pick.
    #[error(
        "{} are set together: name one store (REDIS_URL for one Redis, REDIS_CLUSTER_URLS for a cluster, \
         REDIS_SENTINEL_URLS with REDIS_SENTINEL_MASTER for Sentinel)",
        .0.join(" and ")
    )]
    StoresConflict(Vec<&'static str>),
    /// A tier given with [`Config::tier`](crate::Config::tier) cannot apply.
    #[error("Config::tier({limiter:?}, {limit_type}, {tier:?}, …): {problem}")]
    Tier {
        /// The limiter named.
        limiter: String,
        /// Which of its limits (`ip`, `user`…).
        limit_type: &'static str,
        /// The tier named.
        tier: String,
        /// What is wrong.
        problem: TierProblem,
    },
    /// The overrides file was refused.
    #[error(transparent)]
    Overrides(#[from] OverridesError),
    /// The store could not be built (a malformed URL, a missing feature).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// [`init`](crate::init) was called a second time, or after the configuration was taken from
    /// the environment.
    #[error("ratelimit is already initialised")]
    AlreadyInitialised,
}

/// What the message of a missing variable adds, to say what to set.
fn hint_for(missing: &str) -> &'static str {
    match missing {
        "REDIS_SENTINEL_MASTER" => " (the name the sentinels monitor the primary under, e.g. mymaster)",
        "REDIS_SENTINEL_URLS" => " (the sentinels, e.g. redis://10.0.0.1:26379,redis://10.0.0.2:26379)",
        _ => "",
    }
}

/// What is wrong with a tier given in code ([`ConfigError::Tier`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TierProblem {
    /// The limiter or the tier has an empty name.
    #[error("the limiter and the tier need names")]
    Unnamed,
    /// The tier has no rule.
    #[error("a tier needs at least one rule")]
    NoRules,
    /// Two of its rules have the same window.
    #[error("two rules with the same window")]
    DuplicateWindow,
    /// The same tier of the same limit is given twice.
    #[error("this tier is given twice")]
    Twice,
}
