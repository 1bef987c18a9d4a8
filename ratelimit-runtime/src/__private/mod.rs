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
//! if let Err(e) = check(&LIMITER, &subjects, cost(1), None).await { return Err(From::from(e)); }
//! ```
//!
//! With `refund = …` or a concurrency limit, the check keeps its permit and the body runs in a
//! closure (or an async block), whose result ends the call:
//!
//! ```ignore
//! let permit = match check(&LIMITER, &subjects, cost(1)).await { Ok(p) => p, Err(e) => return Err(e.into()) };
//! end(permit, body_async::<Result<T, E>, _>(async move { body }).await, Refund::OnOk).await
//! ```

use crate::context;
use crate::error::RateLimited;
use crate::limiter::permit::Permit;
use crate::limiter::LazyLimiter;
use crate::model::subject::{Subject, SubjectValue};
use std::fmt::Display;

pub use crate::algorithm::Algorithm;
pub use crate::config::FailurePolicy;
/// actix-web's copies of the header fields the runtime renders (the facade's middleware adds
/// them to allowed responses).
#[cfg(feature = "actix")]
pub use crate::http::actix::actix_headers;
pub use crate::limiter::LazyLimiter as StaticLimiter;
pub use crate::limiter::Limiter;
pub use crate::model::key::cluster_slot;
pub use crate::model::limit::LimiterError;
pub use crate::model::limit_type::LimitType;
pub use crate::model::mode::Mode;
pub use crate::model::subject::ip_key;

/// The limiter's name: the attribute's `name = "…"`, else `module::path::function`.
#[inline]
pub fn name(module_path: &str, function: &str, explicit: Option<&str>) -> String {
    match explicit {
        Some(n) => n.to_owned(),
        None => format!("{module_path}::{function}"),
    }
}

/// Decides a call of an `async fn`, in `tier` (`tier = …`) or without one.
#[inline]
pub async fn check(
    limiter: &'static LazyLimiter,
    subjects: &[Subject<'_>],
    cost: u64,
    tier: Option<&str>,
) -> Result<Permit<'static>, RateLimited> {
    match limiter.get() {
        Ok(l) => l.check_pinned(subjects, cost, None, tier).await,
        Err(e) => Err(misconfigured(limiter, e)),
    }
}

/// When the body's result gives the call's units back (`refund = …`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refund {
    /// Never (the call only ends: its concurrency slots are freed).
    Never,
    /// `refund = on_ok`: when the body returns `Ok`.
    OnOk,
    /// `refund = on_err`: when the body returns `Err`.
    OnErr,
}

impl Refund {
    fn wanted<R: Outcome>(self, result: &R) -> bool {
        match self {
            Refund::Never => false,
            Refund::OnOk => result.is_ok(),
            Refund::OnErr => !result.is_ok(),
        }
    }
}

/// The result of a limited function's body: `Result<T, E>`.
pub trait Outcome {
    /// Whether the body succeeded.
    fn is_ok(&self) -> bool;
}

impl<T, E> Outcome for Result<T, E> {
    #[inline]
    fn is_ok(&self) -> bool {
        Result::is_ok(self)
    }
}

/// Runs the body of a plain `fn` as a closure whose result type is the function's (so that `?`
/// and `return` inside mean what they meant in the function).
#[inline(always)]
pub fn body<R, F: FnOnce() -> R>(f: F) -> R {
    f()
}

/// The body of an `async fn` as an async block whose output is the function's result type.
#[inline(always)]
pub fn body_async<R, F: std::future::Future<Output = R>>(f: F) -> F {
    f
}

/// Ends a call of an `async fn` once its body returned `result`: refunds its units if `refund`
/// says so, and frees its concurrency slots (one round trip, awaited, so that the caller's next
/// call finds the slot free). A failure to give back is logged: the result is the body's.
pub async fn end<R: Outcome>(permit: Permit<'static>, result: R, refund: Refund) -> R {
    let ended = if refund.wanted(&result) { permit.refund().await } else { permit.end().await };
    if let Err(e) = ended {
        tracing::warn!(error = %e, "ratelimit: could not give a call back (refund or concurrency slot)");
    }
    result
}

/// As [`end`], for a plain `fn` (blocking).
pub fn end_blocking<R: Outcome>(permit: Permit<'static>, result: R, refund: Refund) -> R {
    let ended = if refund.wanted(&result) { permit.refund_blocking() } else { permit.end_blocking() };
    if let Err(e) = ended {
        tracing::warn!(error = %e, "ratelimit: could not give a call back (refund or concurrency slot)");
    }
    result
}

/// Registers the limiter the attribute just built, so that `ratelimit::limiter(name)` finds it.
#[inline]
pub fn registered(built: Result<Limiter, LimiterError>) -> Result<Limiter, LimiterError> {
    if let Ok(limiter) = &built {
        crate::limiter::registry::register(limiter);
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
    tier: Option<&str>,
) -> Result<Permit<'static>, RateLimited> {
    match limiter.get() {
        Ok(l) => l.until_ready_in(subjects, cost, std::time::Duration::from_millis(max_wait_ms), tier).await,
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
    tier: Option<&str>,
) -> Result<Permit<'static>, RateLimited> {
    match limiter.get() {
        Ok(l) => l.until_ready_blocking_in(subjects, cost, std::time::Duration::from_millis(max_wait_ms), tier),
        Err(e) => Err(misconfigured(limiter, e)),
    }
}

/// Decides a call of a plain `fn`, in `tier` or without one.
#[inline]
pub fn check_blocking(
    limiter: &'static LazyLimiter,
    subjects: &[Subject<'_>],
    cost: u64,
    tier: Option<&str>,
) -> Result<Permit<'static>, RateLimited> {
    match limiter.get() {
        Ok(l) => l.check_blocking_pinned(subjects, cost, None, tier),
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

/// The subject of an `ip = …` expression: anything [`IpValue`](crate::model::subject::IpValue).
#[inline]
pub fn ip<T: crate::model::subject::IpValue + ?Sized>(value: &T) -> Subject<'_> {
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

/// A value usable as `tier = …`: text naming the caller's tier, or an `Option` of it (`None`:
/// no tier, the limits' own rules).
#[diagnostic::on_unimplemented(
    message = "`tier = …` takes the caller's tier as text (`&str`, `String`, or an `Option` of one), not `{Self}`",
    label = "expected a tier name such as `\"pro\"`, `user.plan` or `plan.as_deref()`"
)]
pub trait Tier {
    /// The tier's name, if any.
    fn tier_name(&self) -> Option<&str>;
}

impl Tier for str {
    fn tier_name(&self) -> Option<&str> {
        Some(self)
    }
}

impl Tier for String {
    fn tier_name(&self) -> Option<&str> {
        Some(self)
    }
}

impl Tier for std::borrow::Cow<'_, str> {
    fn tier_name(&self) -> Option<&str> {
        Some(self)
    }
}

impl Tier for Box<str> {
    fn tier_name(&self) -> Option<&str> {
        Some(self)
    }
}

impl Tier for std::sync::Arc<str> {
    fn tier_name(&self) -> Option<&str> {
        Some(self)
    }
}

impl<T: Tier + ?Sized> Tier for &T {
    fn tier_name(&self) -> Option<&str> {
        (**self).tier_name()
    }
}

impl<T: Tier> Tier for Option<T> {
    fn tier_name(&self) -> Option<&str> {
        self.as_ref().and_then(Tier::tier_name)
    }
}

/// The tier of a `tier = …` expression.
#[inline]
pub fn tier<T: Tier + ?Sized>(value: &T) -> Option<&str> {
    value.tier_name()
}

use crate::model::rule;

/// Why a literal of the attribute is out of the runtime's bounds, as a compile-time message.
///
/// The attribute reads its literals, but the bounds they must respect are the runtime's
/// ([`Rule::from_millis`](crate::model::rule::Rule::from_millis), [`MAX_COUNT`](crate::model::rule::MAX_COUNT)): a
/// proc-macro crate cannot import them, so the expansion asks these `const fn`s in a `const`
/// item spanned at the literal, and a problem becomes a compile error there
/// (`if let Some(p) = window_problem(..) { panic!("{}", p.as_str()) }`).
pub struct Problem {
    text: [u8; 160],
    len: usize,
}

impl Problem {
    const fn new() -> Problem {
        Problem { text: [0; 160], len: 0 }
    }

    const fn push(mut self, s: &str) -> Problem {
        let bytes = s.as_bytes();
        let mut i = 0;
        while i < bytes.len() && self.len < self.text.len() {
            self.text[self.len] = bytes[i];
            self.len += 1;
            i += 1;
        }
        self
    }

    /// `n` in decimal with `_` between groups of three digits, as a Rust literal is written.
    const fn push_number(mut self, n: u64) -> Problem {
        let mut digits = [0u8; 20];
        let (mut count, mut rest) = (0, n);
        loop {
            digits[count] = b'0' + (rest % 10) as u8;
            count += 1;
            rest /= 10;
            if rest == 0 {
                break;
            }
        }
        while count > 0 && self.len < self.text.len() {
            count -= 1;
            self.text[self.len] = digits[count];
            self.len += 1;
            if count > 0 && count % 3 == 0 && self.len < self.text.len() {
                self.text[self.len] = b'_';
                self.len += 1;
            }
        }
        self
    }

    /// The message.
    pub const fn as_str(&self) -> &str {
        // Only whole `&str`s and ASCII digits are pushed; a message cut at the capacity could
        // split a character, and then reads as its valid start.
        let (valid, _) = self.text.split_at(self.len);
        match std::str::from_utf8(valid) {
            Ok(s) => s,
            Err(e) => match std::str::from_utf8(valid.split_at(e.valid_up_to()).0) {
                Ok(s) => s,
                Err(_) => "",
            },
        }
    }
}

/// Whether `ms` is a valid window; `what` names the literal ("window", or "wait": no refusal
/// asks to wait longer than the longest window, so a longer wait would never be used).
pub const fn window_problem(what: &str, ms: u64) -> Option<Problem> {
    let days = rule::MAX_WINDOW.as_secs() / 86_400;
    match rule::Rule::from_millis(ms, 1) {
        Ok(_) => None,
        Err(rule::RuleError::ZeroWindow) => Some(Problem::new().push("the ").push(what).push(" must be at least 1ms")),
        Err(_) => Some(
            Problem::new()
                .push("the ")
                .push(what)
                .push(" is longer than ")
                .push_number(days)
                .push(" days: use at most `")
                .push_number(days)
                .push("d`"),
        ),
    }
}

/// Whether `n` is a valid count; `what` names the literal ("count", or "burst", the capacity
/// of a bucket, bounded as a count).
pub const fn count_problem(what: &str, n: u64) -> Option<Problem> {
    match rule::Rule::from_millis(1, n) {
        Ok(_) => None,
        Err(rule::RuleError::ZeroCount) => {
            Some(Problem::new().push("the ").push(what).push(" must be at least 1 (0 would refuse every call)"))
        }
        Err(_) => Some(
            Problem::new()
                .push("the ")
                .push(what)
                .push(" must be at most ")
                .push_number(rule::MAX_COUNT)
                .push(": write the same rate over a shorter window, or count larger units with `cost`"),
        ),
    }
}

/// Whether `n` is a valid `concurrency` (bounded as a count); `what` is "concurrency".
pub const fn concurrency_problem(what: &str, n: u64) -> Option<Problem> {
    match rule::Rule::from_millis(1, n) {
        Ok(_) => None,
        Err(rule::RuleError::ZeroCount) => {
            Some(Problem::new().push("the ").push(what).push(" must be at least 1 (0 would refuse every call)"))
        }
        Err(_) => Some(Problem::new().push("the ").push(what).push(" must be at most ").push_number(rule::MAX_COUNT)),
    }
}

/// The key prefix of a limit whose attribute gives none.
pub use crate::model::key::DEFAULT_PREFIX;

/// The general decision script as the library sends it, its fragments spliced in: the benchmark
/// harness runs it beside the lean script, and must not assemble a copy that could drift.
pub fn general_script() -> &'static str {
    crate::store::redis::script::GENERAL.code()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(p: Option<Problem>) -> Option<String> {
        p.map(|p| p.as_str().to_owned())
    }

    #[test]
    fn bounds_are_the_rules_bounds() {
        let max_ms = u64::try_from(rule::MAX_WINDOW.as_millis()).unwrap();
        assert_eq!(text(window_problem("window", max_ms)), None);
        assert_eq!(text(window_problem("window", 1)), None);
        assert_eq!(
            text(window_problem("window", max_ms + 1)).as_deref(),
            Some("the window is longer than 366 days: use at most `366d`")
        );
        assert_eq!(text(window_problem("wait", 0)).as_deref(), Some("the wait must be at least 1ms"));
        assert_eq!(text(count_problem("count", rule::MAX_COUNT)), None);
        assert!(rule::Rule::from_millis(1, rule::MAX_COUNT + 1).is_err());
        let over = text(count_problem("burst", rule::MAX_COUNT + 1)).unwrap();
        assert!(over.starts_with("the burst must be at most "), "{over}");
        assert_eq!(
            over.split(' ').nth(6).map(|n| n.trim_end_matches(':').replace('_', "")),
            Some(rule::MAX_COUNT.to_string())
        );
        assert!(text(count_problem("count", 0)).unwrap().contains("at least 1"));
    }

    #[test]
    fn numbers_read_as_rust_literals() {
        for (n, written) in [(0, "0"), (999, "999"), (1000, "1_000"), (1_000_000_000, "1_000_000_000")] {
            assert_eq!(Problem::new().push_number(n).as_str(), written);
        }
        assert_eq!(Problem::new().push_number(u64::MAX).as_str(), "18_446_744_073_709_551_615");
    }

    #[test]
    fn a_long_message_is_cut_whole() {
        let long = "é".repeat(200);
        let cut = Problem::new().push("x").push(&long);
        assert!(cut.as_str().len() <= 160 && cut.as_str().starts_with("xé"));
    }
}
