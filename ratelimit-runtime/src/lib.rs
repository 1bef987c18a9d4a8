//! Runtime of the [`ratelimit`](https://docs.rs/ratelimit-attr) crate (package `ratelimit-attr`):
//! rules, keys, the decision scripts, stores (Redis and in-memory), errors, configuration and
//! metrics.
//!
//! Most users depend on the `ratelimit` facade and write `#[rate_limiter(...)]`; this crate is
//! what the attribute calls, and [`Limiter`] is usable by hand.
//!
//! # Public API
//! The root holds what most users name ([`Limiter`], [`Limit`], [`Rule`], [`Config`],
//! [`RateLimited`]…); the rest is grouped in modules: [`request`] (a call described once, run
//! awaited or blocking), [`error`] (every error), [`store`], [`clock`], [`config`] (the overrides
//! file), [`context`] (who is calling), [`rule`] (rule bounds), [`subject`] (values usable as
//! subjects, networks), [`status`] (peek results and the headroom an allowed call leaves) and
//! [`metrics`] (handing the decision counts to the recorder). The facade re-exports the same
//! layout.
//!
//! # Layers
//! The folders are the layers, from the ground up; each imports only from the ones below it
//! (docs/design.md walks them): `algorithm` (the choice of algorithm and each one's exact step)
//! and `error`; `model` (plain values: rules, subjects, keys, limits, decisions); `rt` (the I/O
//! runtime, clocks, locks) and `context` (who is calling); `metrics`; `store`; `config`;
//! `limiter`; then `http` (the renderings for the HTTP frameworks) and `__private` (what the
//! attribute expands to).
#![warn(missing_docs)]

#[doc(hidden)]
pub mod __private;
mod algorithm;
pub mod config;
pub mod context;
pub mod error;
#[cfg(feature = "http")]
mod http;
mod limiter;
pub mod metrics;
mod model;
mod rt;
pub mod store;

pub use rt::clock;

/// Rules' bounds.
pub mod rule {
    pub use crate::model::rule::{CALENDAR_MONTHS, MAX_COUNT, MAX_WINDOW};
}

/// What can be a subject: values of your own types, and how IPv6 clients are grouped.
pub mod subject {
    pub use crate::model::addr::{parse_ip, Cidr};
    pub use crate::model::subject::{IpValue, SubjectValue, DEFAULT_IPV6_PREFIX};
}

/// What [`Limiter::peek`] reads ([`RuleStatus`](status::RuleStatus)), and the rules in force
/// as headers name them.
pub mod status {
    pub use crate::model::policy::{Headroom, Policy, RuleStatus};
}

/// The requests a [`Limiter`] answers, each run awaited or [blocking](request::Check::blocking):
/// what [`Limiter::check`], [`Limiter::peek`], [`Limiter::reset`] and [`Permit::settle`]
/// return, and their futures; [`Limiter::set_override`], [`Limiter::clear_override`] and
/// [`Limiter::overrides`] too, with the [`Override`](request::Override)s the last one lists.
pub mod request {
    pub use crate::limiter::overrides::{ClearOverride, ListOverrides, OverrideFuture, SetOverride};
    pub use crate::limiter::permit::Settle;
    pub use crate::limiter::request::{Check, CheckFuture, Peek, Reset, StoreFuture};
    pub use crate::model::overriding::Override;
}

pub use algorithm::Algorithm;
pub use config::{init, reload, Config, FailurePolicy};
pub use limiter::permit::Permit;
pub use limiter::registry::{limiter, limiters};
pub use limiter::{Limiter, LimiterBuilder};
pub use model::limit::Limit;
pub use model::limit_type::LimitType;
pub use model::mode::Mode;
pub use model::refusal::{Cause, RateLimited};
pub use model::rule::Rule;
pub use model::subject::Subject;
