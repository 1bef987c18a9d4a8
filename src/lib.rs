//! Rate-limit functions with an attribute, backed by Redis (or memory).
//!
//! See the README for a tour; the attribute's grammar is documented on [`rate_limiter`].
#![warn(missing_docs)]

pub use ratelimit_macros::rate_limiter;
pub use ratelimit_runtime::{
    check_prefix, cluster_slot, context, describe_store, init, ip_key, Algorithm, Cause, Clock, Config, ConfigError,
    Decision, FailurePolicy, IpValue, LazyLimiter, LimitType, Limiter, LimiterBuilder, LimiterError, ManualClock,
    MemoryStore, Permit, Policy, PrefixError, Quota, RateLimited, RedisStore, Rule, RuleError, SentinelSpec,
    SentinelStore, Store, StoreError, StoreHandle, Subject, SubjectValue, SystemClock, DEFAULT_IPV6_PREFIX,
    DEFAULT_PREFIX, DEFAULT_TIMEOUT, MAX_COUNT, MAX_WINDOW,
};
// Waiting, peek and reset (spec §12).
pub use ratelimit_runtime::{limiter, RuleStatus};

/// Limits from configuration (spec §11): the overrides file, shadow mode, reload.
pub use ratelimit_runtime::{reload, unknown_limiters, LimitOverride, Mode, Overrides, OverridesError};

#[cfg(feature = "axum")]
pub mod http;

#[cfg(feature = "cluster")]
pub use ratelimit_runtime::ClusterStore;
/// Certificates for `rediss://` (used with the `tls` feature, on by default).
pub use ratelimit_runtime::TlsConfig;

#[doc(hidden)]
pub mod __private {
    pub use ratelimit_runtime::private::*;
}
