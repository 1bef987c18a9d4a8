//! Runtime of the [`ratelimit`](https://docs.rs/ratelimit-attr) crate (package `ratelimit-attr`):
//! rules, keys, the decision script, stores (Redis and in-memory), errors, configuration and
//! metrics.
//!
//! Most users depend on the `ratelimit` facade and write `#[rate_limiter(...)]`; this crate is
//! what the attribute calls, and [`Limiter`] is usable by hand.
//!
//! # Layers
//! Each module imports only from the floors below it (no import cycles):
//! 1. ground: `rule`, `limit_type`, `subject`, `key`, `algorithm`, `clock`, `error`, `decision`,
//!    `policy`, `status`, `mode`, `addr` (plain values and arithmetic), and `sync` (the
//!    poison-tolerant lock);
//! 2. `limit`: a compiled limit (rules, key template, script arguments), and `io`, the I/O runtime;
//! 3. `store` (trait, memory, redis, cluster, sentinel, scripts, TLS, the startup probe), with
//!    metrics beside it: a store gets all
//!    it needs in the `Call`, never from the limiter or the global configuration;
//! 4. `config`: the global store and failure policy, from code or the environment (overrides
//!    from a file beside it);
//! 5. `context`: who is calling (the request context);
//! 6. `limiter`: `Limiter`, deciding calls (the refusal cache beside it, and `snapshot`: the
//!    limits in force under the overrides file); `wait` (`until_ready`), `admin` (peek and
//!    reset) and `registry` (limiters by name) above it;
//! 7. `private` (the attribute's shims) and `http_response` (HTTP rendering) on top.
#![warn(missing_docs)]

mod addr;
mod admin;
mod algorithm;
mod clock;
pub mod config;
pub mod context;
mod decision;
mod deny_cache;
mod error;
#[cfg(feature = "axum")]
mod http_response;
mod io;
mod key;
mod limit;
mod limit_type;
mod limiter;
mod metrics;
mod mode;
mod overrides;
mod policy;
mod registry;
mod rule;
mod snapshot;
mod status;
mod store;
mod subject;
mod sync;
mod wait;

#[doc(hidden)]
pub mod private;

pub use addr::{parse_ip, Cidr, CidrError, CidrErrorKind};
pub use algorithm::Algorithm;
pub use clock::{Clock, ManualClock, SystemClock};
pub use config::reload;
pub use config::{describe_store, init, Config, ConfigError, FailurePolicy, DEFAULT_TIMEOUT};
pub use decision::Decision;
pub use error::{Cause, RateLimited, StoreError};
pub use key::{check_prefix, cluster_slot, PrefixError, DEFAULT_PREFIX, MAX_PREFIX_LEN};
pub use limit::LimiterError;
pub use limit_type::LimitType;
pub use limiter::{LazyLimiter, Limiter, LimiterBuilder, Permit};
pub use mode::Mode;
pub use overrides::{unknown_limiters, LimitOverride, Overrides, OverridesError};
pub use policy::{Policy, Quota};
pub use registry::limiter;
pub use rule::{Rule, RuleError, MAX_COUNT, MAX_WINDOW};
pub use status::RuleStatus;
#[cfg(feature = "cluster")]
pub use store::cluster::ClusterStore;
pub use store::memory::MemoryStore;
pub use store::redis::RedisStore;
pub use store::sentinel::{SentinelSpec, SentinelStore};
pub use store::tls::TlsConfig;
pub use store::{Answer, RemoteAnswer, Targets};
pub use store::{Call, Pending, RemoteDecision, Store, StoreHandle};
pub use subject::{ip_key, IpValue, Subject, SubjectValue, DEFAULT_IPV6_PREFIX};
