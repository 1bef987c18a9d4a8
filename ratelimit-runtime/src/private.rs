//! What `#[rate_limiter]` expands to. Not a public API: names and shapes change freely.
//!
//! The expansion of one annotated function is, in outline:
//!
//! ```ignore
//! static LIMITER: LazyLimiter = LazyLimiter::new(|| {
//!     Limiter::builder(name(module_path!(), "update", None))
//!         .limit_ms(LimitType::Ip, &[(50_000, 100)], Algorithm::SlidingWindow, "rate_limit:")
//!         .build()
//! });
//! let subjects = [ip_from_context()];
//! if let Err(e) = check(&LIMITER, &subjects, cost(1)).await { return Err(From::from(e)); }
//! ```

use crate::context;
use crate::error::RateLimited;
use crate::limiter::{LazyLimiter, Permit};
use crate::subject::{Subject, SubjectValue};
use std::fmt::Display;

pub use crate::algorithm::Algorithm;
pub use crate::config::FailurePolicy;
pub use crate::key::cluster_slot;
pub use crate::limit::LimiterError;
pub use crate::limit_type::LimitType;
pub use crate::limiter::LazyLimiter as StaticLimiter;
pub use crate::limiter::Limiter;
pub use crate::mode::Mode;
pub use crate::subject::ip_key;

/// The limiter's name: the attribute's `name = "…"`, else `module::path::function`.
#[inline]
pub fn name(module_path: &str, function: &str, explicit: Option<&str>) -> String {
    match explicit {
        Some(n) => n.to_owned(),
        None => format!("{module_path}::{function}"),
    }
}

/// Decides a call of an `async fn`.
#[inline]
pub async fn check(
    limiter: &'static LazyLimiter,
    subjects: &[Subject<'_>],
    cost: u64,
) -> Result<Permit<'static>, RateLimited> {
    match limiter.get() {
        Ok(l) => l.check(subjects, cost).await,
        Err(e) => Err(misconfigured(limiter, e)),
    }
}

/// Registers the limiter the attribute just built, so that `ratelimit::limiter(name)` finds it.
#[inline]
pub fn registered(built: Result<Limiter, LimiterError>) -> Result<Limiter, LimiterError> {
    if let Ok(limiter) = &built {
        crate::registry::register(limiter);
    }
    built
}

/// Decides a call of an `async fn` with `wait = …` (in ms): waits for room up to that long.
#[inline]
pub async fn until_ready(
    limiter: &'static LazyLimiter,
    subjects: &[Subject<'_>],
    cost: u64,
    max_wait_ms: u64,
) -> Result<Permit<'static>, RateLimited> {
    match limiter.get() {
        Ok(l) => l.until_ready(subjects, cost, std::time::Duration::from_millis(max_wait_ms)).await,
        Err(e) => Err(misconfigured(limiter, e)),
    }
}

/// Decides a call of a plain `fn` with `wait = …` (in ms), blocking while it waits.
#[inline]
pub fn until_ready_blocking(
    limiter: &'static LazyLimiter,
    subjects: &[Subject<'_>],
    cost: u64,
    max_wait_ms: u64,
) -> Result<Permit<'static>, RateLimited> {
    match limiter.get() {
        Ok(l) => l.until_ready_blocking(subjects, cost, std::time::Duration::from_millis(max_wait_ms)),
        Err(e) => Err(misconfigured(limiter, e)),
    }
}

/// Decides a call of a plain `fn`.
#[inline]
pub fn check_blocking(
    limiter: &'static LazyLimiter,
    subjects: &[Subject<'_>],
    cost: u64,
) -> Result<Permit<'static>, RateLimited> {
    match limiter.get() {
        Ok(l) => l.check_blocking(subjects, cost),
        Err(e) => Err(misconfigured(limiter, e)),
    }
}

/// The refusal of every call of a limiter that could not be built: a server error naming the
/// limiter, never a store outage. (The attribute validates everything the builder does, so this
/// is unreachable in practice; it exists so that no input can make generated code panic.)
fn misconfigured(limiter: &LazyLimiter, e: &LimiterError) -> RateLimited {
    use std::sync::Arc;
    let name = limiter.name().unwrap_or("<unnamed limiter>");
    RateLimited {
        limiter: Arc::from(name),
        policy: None,
        policies: Arc::from(Vec::new()),
        retry_after: std::time::Duration::ZERO,
        cause: crate::error::Cause::Misconfigured,
        limit_type: LimitType::Global,
        source: Some(Box::new(crate::error::StoreError::misconfigured_by(
            format!("the limiter {name} is invalid"),
            e.clone(),
        ))),
    }
}

/// The subject of a `Global` limit.
#[inline]
pub fn global() -> Subject<'static> {
    Subject::global()
}

/// The client IP from the request context (`type = Ip` without `ip = …`).
#[inline]
pub fn ip_from_context() -> Subject<'static> {
    context::ip_subject()
}

/// The user id from the request context (`type = User` without `user = …`).
#[inline]
pub fn user_from_context() -> Subject<'static> {
    context::user_subject()
}

/// Wraps the value of a `user = …` / `key = …` expression. The method
/// `__ratelimit_subject` prefers [`SubjectValue`] and falls back to `Display`
/// (autoref specialisation: call it as `(&SubjectOf(&value)).__ratelimit_subject()` with
/// both `ViaSubjectValue` and `ViaDisplay` in scope).
pub struct SubjectOf<'a, T: ?Sized>(pub &'a T);

/// See [`SubjectOf`].
pub trait ViaSubjectValue<'a> {
    /// The subject.
    fn __ratelimit_subject(&self) -> Subject<'a>;
}

impl<'a, T: ?Sized + SubjectValue> ViaSubjectValue<'a> for SubjectOf<'a, T> {
    fn __ratelimit_subject(&self) -> Subject<'a> {
        let value: &'a T = self.0;
        value.to_subject()
    }
}

/// See [`SubjectOf`].
pub trait ViaDisplay {
    /// The subject.
    fn __ratelimit_subject(&self) -> Subject<'static>;
}

impl<T: ?Sized + Display> ViaDisplay for &SubjectOf<'_, T> {
    fn __ratelimit_subject(&self) -> Subject<'static> {
        Subject::bytes(self.0.to_string().into_bytes())
    }
}

/// The subject of an `ip = …` expression: anything [`IpValue`](crate::subject::IpValue).
#[inline]
pub fn ip<T: crate::subject::IpValue + ?Sized>(value: &T) -> Subject<'_> {
    value.to_ip_subject()
}

/// A value usable as `cost = …`: unsigned and signed integers (negative means 0).
#[diagnostic::on_unimplemented(
    message = "`cost = …` takes an integer (the units this call consumes), not `{Self}`",
    label = "expected an integer such as `1`, `n` or `items.len()`"
)]
pub trait Cost {
    /// The cost in units.
    fn units(self) -> u64;
}

macro_rules! cost_unsigned {
    ($($t:ty),*) => {$(
        impl Cost for $t {
            fn units(self) -> u64 { u64::try_from(self).unwrap_or(u64::MAX) }
        }
    )*};
}
macro_rules! cost_signed {
    ($($t:ty),*) => {$(
        impl Cost for $t {
            fn units(self) -> u64 { u64::try_from(self).unwrap_or(if self < 0 { 0 } else { u64::MAX }) }
        }
    )*};
}
cost_unsigned!(u8, u16, u32, u64, u128, usize);
cost_signed!(i8, i16, i32, i64, i128, isize);

impl<T: Cost + Copy> Cost for &T {
    fn units(self) -> u64 {
        (*self).units()
    }
}

/// The units of a `cost = …` expression.
#[inline]
pub fn cost(value: impl Cost) -> u64 {
    value.units()
}
