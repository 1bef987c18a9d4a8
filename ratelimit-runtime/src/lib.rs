//! Runtime of the [`ratelimit`](https://docs.rs/ratelimit) crate: rules, keys, the decision
//! script, stores (Redis and in-memory), errors and configuration.
//!
//! Most users depend on the `ratelimit` facade and write `#[rate_limiter(...)]`; this crate is
//! what the attribute calls, and [`Limiter`] is usable by hand.
//!
//! # Layers
//! Each module imports only from the floors below it (no import cycles):
//! 1. ground: `rule`, `limit_type`, `subject`, `key`, `algorithm`, `clock`, `error`, `decision`,
//!    `policy` (plain values and arithmetic);
//! 2. `limit`: a compiled limit (rules, key template, script arguments), and `io`, the I/O runtime;
//! 3. `store` (trait, memory, redis, cluster, scripts), with metrics beside it: a store gets all
//!    it needs in the `Call`, never from the limiter or the global configuration;
//! 4. `config`: the global store and failure policy, from code or the environment (overrides
//!    from a file beside it);
//! 5. `context`: who is calling (the request context);
//! 6. `limiter`: `Limiter`, deciding calls (the refusal cache and waiting beside it);
//! 7. `private` (the attribute's shims) and `http_response` (HTTP rendering) on top.
#![warn(missing_docs)]

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
mod policy;
mod rule;
mod store;
mod subject;

#[doc(hidden)]
pub mod private;

pub use algorithm::Algorithm;
pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{describe_store, init, Config, ConfigError, FailurePolicy, DEFAULT_TIMEOUT};
pub use decision::Decision;
pub use error::{Cause, RateLimited, StoreError};
pub use key::{check_prefix, cluster_slot, PrefixError, DEFAULT_PREFIX, MAX_PREFIX_LEN};
pub use limit::LimiterError;
pub use limit_type::LimitType;
pub use limiter::{LazyLimiter, Limiter, LimiterBuilder, Permit};
pub use policy::{Policy, Quota};
pub use rule::{Rule, RuleError, MAX_COUNT, MAX_WINDOW};
#[cfg(feature = "cluster")]
pub use store::cluster::ClusterStore;
pub use store::memory::MemoryStore;
pub use store::redis::RedisStore;
pub use store::{Call, Pending, RemoteDecision, Store, StoreHandle};
pub use subject::{ip_key, IpValue, Subject, SubjectValue, DEFAULT_IPV6_PREFIX};
