//! Runtime of the [`ratelimit`](https://docs.rs/ratelimit-attr) crate (package `ratelimit-attr`):
//! rules, keys, the decision script, stores (Redis and in-memory), errors, configuration and
//! metrics.
//!
//! Most users depend on the `ratelimit` facade and write `#[rate_limiter(...)]`; this crate is
//! what the attribute calls, and [`Limiter`] is usable by hand.
//!
//! # Public API
//! The root holds what most users name ([`Limiter`], [`Rule`], [`Config`], [`RateLimited`]…);
//! the rest is grouped in modules: [`store`] (stores and their errors), [`clock`], [`config`]
//! (the global configuration and the overrides file), [`context`] (who is calling), [`rule`]
//! (rule bounds and errors), [`subject`] (values usable as subjects, networks), [`status`]
//! (peek results and the headroom an allowed call leaves) and [`metrics`] (handing the decision
//! counts to the recorder). The facade re-exports the same layout.
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
//! 6. `limit_set` (limits decided in one store call, with the refusal cache below it), then
//!    `snapshot` (the limits in force under the overrides file), then `limiter` (`Limiter` and
//!    its builder), then `decide`: the one decision path, `Limiter::decide`, and the `check`
//!    entry points over it; `wait` (`until_ready`), `admin` (peek and reset) and `registry`
//!    (limiters by name) above it;
//! 7. `private` (the attribute's shims) and `http_response` (HTTP rendering: status, header
//!    fields, body) on top, with its two renderings for other frameworks beside it:
//!    `actix_response` (actix-web) and `grpc_status` (tonic).
#![warn(missing_docs)]

#[cfg(feature = "actix")]
mod actix_response;
mod addr;
mod admin;
mod algorithm;
pub mod clock;
pub mod config;
pub mod context;
mod decide;
mod decision;
mod error;
#[cfg(feature = "tonic")]
mod grpc_status;
#[cfg(feature = "http")]
mod http_response;
mod io;
mod key;
mod limit;
mod limit_set;
mod limit_type;
mod limiter;
pub mod metrics;
mod mode;
mod overrides;
mod permit;
mod policy;
mod refusal_cache;
mod registry;
mod reserve;
pub mod rule;
mod snapshot;
pub mod status;
pub mod store;
pub mod subject;
mod sync;
mod wait;

#[doc(hidden)]
pub mod private;

pub use addr::{parse_ip, Cidr, CidrError, CidrErrorKind};
pub use algorithm::Algorithm;
pub use config::{init, reload, Config, FailurePolicy};
pub use error::{Cause, RateLimited};
pub use limit_type::LimitType;
pub use limiter::{Limiter, LimiterBuilder};
pub use mode::Mode;
pub use permit::Permit;
pub use registry::limiter;
pub use rule::Rule;
pub use subject::Subject;
