//! Why a limiter, or one of its values, could not be built.

use crate::algorithm::Algorithm;
use std::net::IpAddr;
use std::time::Duration;

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
    /// A calendar window of a number of months that does not divide the year.
    #[error("a calendar window is 1, 2, 3, 4, 6 or 12 months (its windows align to the year)")]
    Months,
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
    /// A rule in calendar months in a limit of another algorithm than `FixedWindow`: calendar
    /// months are fixed windows (a month has no fixed length to slide by or refill over).
    #[error("rules in calendar months count in fixed windows: use Algorithm::FixedWindow, not {0:?}")]
    CalendarNeedsFixedWindow(Algorithm),
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
    /// A runtime override's TTL is shorter than 1ms or longer than
    /// [`MAX_WINDOW`](crate::rule::MAX_WINDOW).
    #[error("an override's TTL must be between 1ms and 366 days, not {0:?}")]
    InvalidOverrideTtl(Duration),
    /// A runtime override names a limit type the limiter has no rate limit of.
    #[error("the limiter has no rate limit of type {0} to override")]
    NoLimitToOverride(&'static str),
    /// A runtime override gives more rules than a limit may hold.
    #[error("an override holds at most {0} rules")]
    TooManyOverrideRules(usize),
}

/// Why a runtime override could not be set, cleared or listed
/// ([`Limiter::set_override`](crate::Limiter::set_override) and its kin).
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OverrideError {
    /// The override is invalid (its rules, its TTL, its type): nothing was changed.
    #[error(transparent)]
    Invalid(#[from] BuildError),
    /// The store failed: the override may or may not have been written.
    #[error(transparent)]
    Store(#[from] crate::error::StoreError),
}
