//! Rate-limit functions with an attribute, backed by Redis (or memory).
//!
//! ```no_run
//! use ratelimit::{rate_limiter, RateLimited};
//!
//! #[rate_limiter(type = Ip, rules = [(20s, 10), (1m, 50)])]
//! async fn hello() -> Result<&'static str, RateLimited> {
//!     Ok("hello")
//! }
//! ```
//!
//! The attribute's grammar is documented on [`rate_limiter`]. The README is the tour; each
//! topic has a guide in the repository's `docs/` folder: `attribute.md` (grammar, by hand,
//! errors), `configuration.md` (stores, failure policy, the overrides file), `algorithms.md`,
//! `production.md` (TLS, Cluster, Sentinel, Valkey, logs), `integrations.md` (axum, tonic,
//! actix-web), `http.md` (the example server, the `RateLimit` fields and their draft),
//! `waiting.md` (waiting, peek, reset), `metrics.md`, `testing.md` (testing your own functions on
//! a [`ManualClock`](clock::ManualClock)), `refunds.md`, `tiers.md`, `failure.md`, and
//! `design.md` (how it is built).
//!
//! # Where things are
//! - **Limiting a function**: [`rate_limiter`] (the attribute) and the error it returns,
//!   [`RateLimited`] with its [`Cause`]. Limiters are found by name with [`limiter`].
//! - **Limiting by hand**: [`Limiter`], built with [`LimiterBuilder`] from [`Limit`]s (a
//!   [`LimitType`], [`Rule`]s, an [`Algorithm`] and options); each call passes [`Subject`]s,
//!   described once ([`Limiter::check`] with its cost, tier, time and wait, [`request`]) and run
//!   awaited or blocking, and gets a [`Permit`]. Rule bounds: [`rule`]. Peek results and header
//!   quotas: [`status`]. Subjects from your own types, and IP networks: [`subject`].
//! - **Errors**: every error the library returns, in [`error`].
//! - **Configuration**: [`Config`] and [`init`] (store, failure policy: [`FailurePolicy`]);
//!   the overrides file (limits changed without a deploy, [`Mode`] shadow or off) and its
//!   [`reload`]: [`config`].
//! - **Stores**: [`store`] (memory, Redis, Cluster, Sentinel, TLS). **Clocks** for the memory
//!   store: [`clock`].
//! - **Who is calling**: [`context`] (the request context the limits read the IP and user from);
//!   installed per request by the integrations: axum/tower in `http` (feature `axum`), gRPC in
//!   `tonic` (feature `tonic`), actix-web in `actix` (feature `actix`).
#![warn(missing_docs)]

pub use ratelimit_macros::rate_limiter;
pub use ratelimit_runtime::{
    init, limiter, limiters, reload, Algorithm, Cause, Config, FailurePolicy, Limit, LimitType, Limiter,
    LimiterBuilder, Mode, Permit, RateLimited, Rule, Subject,
};

pub use ratelimit_runtime::{clock, context};

#[cfg(feature = "actix")]
pub mod actix;
#[cfg(any(feature = "axum", feature = "tonic", feature = "actix"))]
pub mod http;
#[cfg(feature = "tonic")]
pub mod tonic;

/// Where counts live: the [`Store`](store::Store)s and the handle limiters share them by.
pub mod store {
    #[cfg(feature = "cluster")]
    pub use ratelimit_runtime::store::ClusterStore;
    pub use ratelimit_runtime::store::{
        MemoryStore, RedisStore, SentinelSpec, SentinelStore, Store, StoreError, StoreHandle, TlsConfig,
        DEFAULT_MAX_KEYS, DEFAULT_PREFIX, MAX_PREFIX_LEN,
    };
}

/// The requests a [`Limiter`] answers, each run awaited or
/// [blocking](request::Check::blocking): what [`Limiter::check`], [`Limiter::peek`],
/// [`Limiter::reset`] and [`Permit::refund`] return, and their futures.
pub mod request {
    pub use ratelimit_runtime::request::*;
}

/// Every error the library returns but the refusal itself ([`RateLimited`]): a store's failure,
/// and why a rule, a prefix, a network, a limiter, a configuration or a value was refused.
pub mod error {
    pub use ratelimit_runtime::error::*;
}

/// Global configuration beside [`Config`]: the overrides file and the store in use.
pub mod config {
    pub use ratelimit_runtime::config::{
        describe_store, parse_duration, parse_rule, settings, unknown_limiters, LimitOverride, Overrides, Settings,
        DEFAULT_TIMEOUT,
    };
}

/// The metrics the limiters report (`ratelimit_decisions_total` and the rest, through the
/// `metrics` facade): decision counts reach the recorder within [`FLUSH_EVERY`](metrics::FLUSH_EVERY),
/// or at once after [`flush`](metrics::flush).
pub mod metrics {
    pub use ratelimit_runtime::metrics::{flush, FLUSH_EVERY};
}

/// Rules' bounds.
pub mod rule {
    pub use ratelimit_runtime::rule::{CALENDAR_MONTHS, MAX_COUNT, MAX_WINDOW};
}

/// What can be a subject: values of your own types ([`SubjectValue`](subject::SubjectValue),
/// [`IpValue`](subject::IpValue)), IP networks ([`Cidr`](subject::Cidr)) and how IPv6 clients
/// are grouped.
pub mod subject {
    pub use ratelimit_runtime::subject::{parse_ip, Cidr, IpValue, SubjectValue, DEFAULT_IPV6_PREFIX};
}

/// Where a limiter's rules stand: per rule ([`RuleStatus`](status::RuleStatus), from
/// [`Limiter::peek`](crate::Limiter::peek)) and after an allowed call
/// ([`Headroom`](status::Headroom), for `RateLimit` headers).
pub mod status {
    pub use ratelimit_runtime::status::{Headroom, Policy, RuleStatus};
}

#[doc(hidden)]
pub mod __private {
    pub use ratelimit_runtime::__private::*;
}

/// The examples of docs/refunds.md, run as doctests (not part of the API).
#[cfg(doctest)]
#[doc = include_str!("../docs/refunds.md")]
pub struct RefundsDoc;

/// The examples of docs/overrides.md, run as doctests (not part of the API).
#[cfg(doctest)]
#[doc = include_str!("../docs/overrides.md")]
pub struct OverridesDoc;
/// The examples of docs/policies.md, run as doctests (not part of the API).
#[cfg(doctest)]
#[doc = include_str!("../docs/policies.md")]
pub struct PoliciesDoc;
