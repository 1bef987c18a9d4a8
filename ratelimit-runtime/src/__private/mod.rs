//! What `#[rate_limiter]` expands to. Not a public API: names and shapes change freely.
//!
//! The expansion of one annotated function is, in outline, the public builder and request API
//! (named by their public paths, `::ratelimit::Limiter` and so on):
//!
//! ```ignore
//! static LIMITER: LazyLimiter = LazyLimiter::new(
//!     || name(module_path!(), "update", None),
//!     |name| Limiter::builder(name)
//!         .limit(Limit::new(LimitType::Ip, [Rule::from_millis(50_000, 100)?]))
//!         .build(),
//! );
//! let subjects = [ip_from_context()];
//! let checked = match LIMITER.get() {
//!     Ok(limiter) => limiter.check(&subjects).cost(cost(n)).await,
//!     Err(refused) => Err(refused),
//! };
//! if let Err(e) = checked { return Err(From::from(e)); }
//! ```
//!
//! With `refund = …`, `settle = …` or a concurrency limit, the check keeps its permit and the
//! body runs in a closure (or an async block), whose result ends the call (`settle(permit,
//! result, settle_units(<expr>, &result))` with `settle = …`):
//!
//! ```ignore
//! end(permit, body_async::<Result<T, E>, _>(async move { body }).await, RefundWhen::OnOk).await
//! ```

mod bounds;
mod lazy;
mod values;

use crate::context;
use crate::limiter::permit::{Permit, Settle};
use crate::model::subject::Subject;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

pub use bounds::{concurrency_problem, count_problem, months_problem, window_problem, Problem};
pub use lazy::{Declared, LazyLimiter};
// The expansion submits each limiter's static with `inventory::submit!`: through this path, users
// need no dependency of their own.
pub use inventory;
pub(crate) use lazy::declared;
pub use values::{cost, ip, tier, Cost, SubjectOf, Tier, ViaDisplay, ViaSubjectValue};

/// The limiter's name: the attribute's `name = "…"`, else `module::path::function`.
#[inline]
pub fn name(module_path: &str, function: &str, explicit: Option<&str>) -> String {
    match explicit {
        Some(n) => n.to_owned(),
        None => format!("{module_path}::{function}"),
    }
}

/// When the body's result gives the call's units back (`refund = …`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefundWhen {
    /// Never (the call only ends: its concurrency slots are freed).
    Never,
    /// `refund = on_ok`: when the body returns `Ok`.
    OnOk,
    /// `refund = on_err`: when the body returns `Err`.
    OnErr,
}

impl RefundWhen {
    fn wanted<T, E>(self, result: &Result<T, E>) -> bool {
        match self {
            RefundWhen::Never => false,
            RefundWhen::OnOk => result.is_ok(),
            RefundWhen::OnErr => result.is_err(),
        }
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
pub fn body_async<R, F: Future<Output = R>>(f: F) -> F {
    f
}

/// Ends a call once its body returned `result`: refunds its units if `when` says so, and frees
/// its concurrency slots (one round trip: `.await` it, so that the caller's next call finds the
/// slot free, or run it with `.blocking()`). A failure to give back is logged: the result is the
/// body's.
pub fn end<T, E>(permit: Permit<'static>, result: Result<T, E>, when: RefundWhen) -> Ended<T, E> {
    let giving = if when.wanted(&result) { permit.refund() } else { permit.end() };
    Ended { giving, result }
}

/// `settle = …` as the user wrote it, applied to the body's result `R` (typed so that a
/// closure's parameter needs no annotation, and a wrong type is reported at the expression).
#[inline(always)]
pub fn settle_units<R, F: FnOnce(&R) -> u64>(f: F, result: &R) -> u64 {
    f(result)
}

/// Ends a call once its body returned `result`, settling its units to `units`, what `settle =
/// …` read from the result (the cost was the estimate), and freeing its concurrency slots: one
/// round trip, as [`end`].
pub fn settle<T, E>(permit: Permit<'static>, result: Result<T, E>, units: u64) -> Ended<T, E> {
    Ended { giving: permit.settle(units), result }
}

/// A call being ended (see [`end`]).
#[must_use = "a call's end gives nothing back until it is awaited or run with `.blocking()`"]
pub struct Ended<T, E> {
    giving: Settle<'static>,
    result: Result<T, E>,
}

impl<T, E> Ended<T, E> {
    /// Gives back, blocking the thread; then the body's result.
    pub fn blocking(self) -> Result<T, E> {
        if let Err(e) = self.giving.blocking() {
            not_given_back(&e);
        }
        self.result
    }
}

impl<T, E> IntoFuture for Ended<T, E> {
    type Output = Result<T, E>;
    type IntoFuture = EndedFuture<T, E>;

    fn into_future(self) -> EndedFuture<T, E> {
        EndedFuture { giving: self.giving.into_future(), result: Some(self.result) }
    }
}

/// An [`Ended`] being awaited.
pub struct EndedFuture<T, E> {
    giving: crate::limiter::request::StoreFuture<()>,
    result: Option<Result<T, E>>,
}

// The body's result is moved out, never pinned: the future is `Unpin` whatever it holds.
impl<T, E> Unpin for EndedFuture<T, E> {}

impl<T, E> Future for EndedFuture<T, E> {
    type Output = Result<T, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T, E>> {
        let this = self.get_mut();
        if let Err(e) = ready!(Pin::new(&mut this.giving).poll(cx)) {
            not_given_back(&e);
        }
        match this.result.take() {
            Some(result) => Poll::Ready(result),
            // Polled again after it finished: a caller's bug, answered with what is left.
            None => Poll::Pending,
        }
    }
}

fn not_given_back(e: &crate::error::StoreError) {
    tracing::warn!(error = %e, "ratelimit: could not give a call back (refund or concurrency slot)");
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
