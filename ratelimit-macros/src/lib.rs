//! The `#[rate_limiter]` attribute of the [`ratelimit`](https://docs.rs/ratelimit-attr) crate
//! (package `ratelimit-attr`). Use it through `ratelimit::rate_limiter`; the generated code calls
//! `ratelimit::__private`.
//!
//! The crate is split by stage: `item` reads the function (its signature; the body stays
//! tokens), `parse` reads each option into a typed model, `rules` reads the `(window, count)`
//! literals, `validate` checks options against each other, the stacked attributes against each
//! other and the function's signature, `stack` finds the stacked attributes, `bounds` writes the
//! compile-time checks of the literals against the runtime's bounds, and `expand` writes the code.
//! Imports run one way only: `errors`, `ungroup`, `item` → `rules` → `parse` → `validate`,
//! `stack`, `bounds` → `expand` → the entry point.

mod bounds;
mod errors;
mod expand;
mod item;
mod parse;
mod rules;
mod settle;
mod signature;
mod stack;
mod ungroup;
mod validate;

use proc_macro::TokenStream;

/// Rate-limits a function: each call is counted, and a call over a limit returns
/// `Err(RateLimited.into())` without running the body.
///
/// ```text
/// #[rate_limiter( type = <Type>, rules = [ (<window>, <count>), ... ] [, option = value]* )]
///
/// <Type>    := Global | Default | Ip | User | Key          (Default is an alias of Global)
/// <window>  := integer literal with a unit: ms | s | m | h | d      e.g. 500ms 20s 1m 2h 1d
///            | calendar months: 1mo 2mo 3mo 4mo 6mo 12mo          (fixed windows, UTC)
/// <count>   := positive integer literal (may use _ separators)
/// option    := prefix = "str"            key prefix, default "rate_limit:"
///            | name = "str"              limiter name, default module_path!() + "::" + fn name
///            | ip = <expr>               the client IP (type = Ip), else the request context's
///            | user = <expr>             the user id (type = User), else the request context's
///            | key = <expr>              what a type = Key limit counts per (required)
///            | algorithm = <Alg>         SlidingWindow (default) | SlidingWindowCounter
///                                        | FixedWindow | TokenBucket | LeakyBucket | Gcra
///            | burst = <count>           bucket capacity (TokenBucket, LeakyBucket, Gcra)
///            | cost = <expr>             units this call consumes (any integer), default 1
///            | on_error = allow | deny | local
///                                        what to do when the store fails (default: global policy;
///                                        local: decide in process memory until it answers)
///            | wait = <duration>         wait up to this long for room instead of refusing
///            | mode = enforce | shadow   shadow: decide and count, never refuse (default enforce)
///            | tier = <expr>             the caller's tier (text, or an Option of it): its rules
///            | refund = on_ok | on_err   give the call's units back when the body returns Ok / Err
///            | settle = <expr>           with cost = <estimate>: the units the call took, from the
///                                        body's &Result<T, E> (a closure or a function giving u64)
///            | block = <duration>        once refused as exceeded, refuse the subject this long
///            | crate = "path"            where `ratelimit` is reachable, default "::ratelimit"
///
/// Instead of `rules`: concurrency = N [, lease = <duration>]
///                                        at most N calls of a subject in flight (lease: 60s)
/// ```
///
/// A rule `(20s, 10)` admits at most 10 units in any 20 seconds. Windows run from 1ms to 366
/// days and counts (and bursts) from 1 to 1_000_000_000; both must be literals, checked at
/// compile time against the runtime's `MAX_WINDOW` and `MAX_COUNT`. A window in months,
/// `(1mo, 10_000)`, counts per calendar month in UTC (reset at 00:00 on the 1st, whatever the
/// month's length): a fixed window, so the attribute's algorithm is `FixedWindow` (implied when
/// every rule is in months; write it beside rules in other units).
///
/// * **Types.** `Global`: one budget shared by every caller. `Ip`: one per client IP (IPv6 per
///   /64), from `ip = …` (anything `ratelimit::subject::IpValue`: `IpAddr`, `SocketAddr`, text) or else from the
///   request context that the HTTP layer or `ratelimit::context::scope` installs. `User`: one
///   per user id, from `user = …` or the request context. `Key`: one per value of `key = …`.
///   `user`/`key` accept strings, bytes, integers, `Option`s (where `None` is a missing
///   identity) and any `Display` value.
/// * **Missing identities** are never replaced by a shared key: `type = Key` without `key` is a
///   compile error, and a call whose IP or user can be found nowhere fails with a
///   `RateLimited` whose `cause()` is `Cause::SubjectMissing`.
/// * **Expressions** (`ip`, `user`, `key`, `cost`) are evaluated at the start of each call, in the
///   function's scope: they may use parameters, `self` and its fields. Borrows they take end
///   before the body runs.
/// * **The function** must return `Result<T, E>` where `E: From<RateLimited>` (any path type
///   ending in `Result`, e.g. `io::Result<T>` or `anyhow::Result<T>`, is accepted if its error
///   converts). It may be `async` or not (a plain `fn` blocks on the store), a free function,
///   an inherent or trait-impl method (`self`, `&self`, `&mut self`, `self: Box<Self>`),
///   generic, with `impl Trait` arguments. Under `#[async_trait]` the check runs inside the boxed
///   future.
/// * **Stacking.** Several `#[rate_limiter]` on one function make **one** limiter: all rules of
///   all attributes are decided in one atomic step (one store round trip); the call passes only
///   if every rule passes, and a refused call is recorded in no rule. `type`, `rules`, `prefix`,
///   `algorithm`, `burst`, `mode` and `ip`/`user`/`key` belong to each attribute; `name`, `cost`,
///   `on_error`, `wait`, `tier` and `crate` to the whole limiter (give each once, or identically).
///   Siblings are recognised by name: write them `rate_limiter` or `ratelimit::rate_limiter`
///   (an attribute imported under another name is refused below the outermost one).
/// * **Waiting.** With `wait = 2s` (same literals as windows), a call refused for lack of room
///   sleeps until its retry-after (plus a little jitter) and tries again, and returns the
///   refusal at once when the next wait would end past 2s from the call. An `async fn` sleeps on
///   the library's timer, a `fn` blocks its thread. For calls toward an outside API's budget.
/// * **By name.** The limiter registers under its name when it is built (first call):
///   `ratelimit::limiter("module::function")` finds it, to `peek` at or `reset` counts.
/// * **Shadow mode.** `mode = shadow` decides and counts this attribute's rules but never
///   refuses: a would-be refusal is logged (throttled) and counted as `shadow_denied`. The
///   overrides file (`RATELIMIT_CONFIG`) can change rules and modes without a rebuild.
/// * **Tiers.** `tier = user.plan` (a `&str`, `String`, or an `Option` of one; `None` is no
///   tier) chooses the rules of this call: those a tier gets from code (`Config::tier`,
///   `Limit::tier`) or from the overrides file (`[[limit]]` with `tier = "pro"`), else
///   the attribute's. Unknown tiers get the attribute's rules. See `docs/tiers.md`.
/// * **Refunds, penalties, concurrency.** `refund = on_ok` counts only failures (logins),
///   `refund = on_err` makes failures free; `block = 2m` refuses a subject for 2 minutes once
///   this limit refused it as exceeded (in every process); `concurrency = N` admits at most N
///   calls of a subject at a time, the slot freed on return, error, panic or a dropped future.
///   `refund` belongs to the whole limiter; `block`, `concurrency` and `lease` to their attribute.
///   See the repository's docs/refunds.md.
/// * **Charging what a call took.** `cost = 100, settle = |r| …` takes an estimate before the
///   body and settles the call to what `settle` reads from its result: fewer units give the rest
///   back, more are taken past the limit (debt, refusing later calls until it has left). It
///   belongs to the whole limiter. See the repository's docs/policies.md.
/// * **Cost of a call.** The limiter is built once per function, in a `static`, on first use;
///   per call only the subjects are computed and one check is made.
///
/// # Examples
///
/// A per-IP limit on an async handler; the IP comes from the request context:
///
/// ```
/// use ratelimit::{context::{self, RequestContext}, rate_limiter, RateLimited};
///
/// #[rate_limiter(type = Ip, rules = [(20s, 10), (1m, 50)])]
/// async fn hello() -> Result<&'static str, RateLimited> {
///     Ok("hello")
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let client = RequestContext::new().with_ip("203.0.113.7".parse().unwrap());
/// context::scope(client, async {
///     for _ in 0..10 {
///         assert_eq!(hello().await.unwrap(), "hello");
///     }
///     let refused = hello().await.unwrap_err();
///     assert!(refused.to_string().contains("(ip, 10 per 20s)"));
/// })
/// .await;
///
/// // Without any IP, the call is refused rather than counted under a shared key.
/// assert_eq!(hello().await.unwrap_err().cause(), ratelimit::Cause::SubjectMissing);
/// # }
/// ```
///
/// A plain function limited per application key, with a cost, and an error type of your own:
///
/// ```
/// use ratelimit::{rate_limiter, RateLimited};
///
/// #[derive(Debug)]
/// enum ApiError {
///     TooManyRequests(RateLimited),
/// }
///
/// impl From<RateLimited> for ApiError {
///     fn from(e: RateLimited) -> Self {
///         ApiError::TooManyRequests(e)
///     }
/// }
///
/// #[rate_limiter(type = Key, rules = [(1h, 1_000)], key = format!("{tenant}/export"), cost = rows)]
/// fn export(tenant: &str, rows: u32) -> Result<u32, ApiError> {
///     Ok(rows)
/// }
///
/// assert_eq!(export("acme", 600).unwrap(), 600);
/// assert!(matches!(export("acme", 600), Err(ApiError::TooManyRequests(_))));
/// assert_eq!(export("globex", 600).unwrap(), 600);
/// ```
///
/// Stacked limits on a method, the IP read from `self` and the user from a parameter, decided
/// together:
///
/// ```
/// use ratelimit::{rate_limiter, LimitType, RateLimited};
/// use std::net::IpAddr;
///
/// struct Session {
///     peer: IpAddr,
/// }
///
/// impl Session {
///     #[rate_limiter(type = User, rules = [(10s, 2)], user = user_id, name = "orders::create")]
///     #[rate_limiter(type = Ip, rules = [(10s, 3)], ip = self.peer)]
///     #[rate_limiter(type = Global, rules = [(1s, 1_000)], algorithm = TokenBucket, burst = 2_000)]
///     fn create_order(&self, user_id: u64) -> Result<(), RateLimited> {
///         Ok(())
///     }
/// }
///
/// let session = Session { peer: "203.0.113.8".parse().unwrap() };
/// session.create_order(1).unwrap();
/// session.create_order(1).unwrap();
/// let refused = session.create_order(1).unwrap_err();
/// assert_eq!(refused.limit_type(), LimitType::User);
/// assert_eq!(refused.limiter(), "orders::create");
/// // The refused call was not counted against the IP: one call is left there.
/// session.create_order(2).unwrap();
/// assert_eq!(session.create_order(3).unwrap_err().limit_type(), LimitType::Ip);
/// ```
///
/// Mistakes are compile errors that point at the offending tokens and say what to write:
///
/// ```compile_fail
/// # use ratelimit::{rate_limiter, RateLimited};
/// // error: `user = …` only applies to `type = User`, and this limit is `type = Ip`:
/// //        use `ip = …` instead, or change the type
/// #[rate_limiter(type = Ip, rules = [(20s, 10)], user = "alice")]
/// fn update() -> Result<(), RateLimited> {
///     Ok(())
/// }
/// ```
///
/// ```compile_fail
/// # use ratelimit::rate_limiter;
/// // error: the window needs a unit: write `20s` or use ms, s, m, h or d
/// #[rate_limiter(type = Global, rules = [(20, 10)])]
/// fn update() -> Result<(), ratelimit::RateLimited> {
///     Ok(())
/// }
/// ```
///
/// ```compile_fail
/// # use ratelimit::rate_limiter;
/// // error: #[rate_limiter] needs the function to return Result<T, E> where
/// //        E: From<ratelimit::RateLimited>
/// #[rate_limiter(type = Global, rules = [(20s, 10)])]
/// fn update() -> u32 {
///     1
/// }
/// ```
///
/// If you re-export `ratelimit` from another crate, tell the attribute where it is:
/// `#[rate_limiter(type = Global, rules = [(1s, 100)], crate = "::my_platform::ratelimit")]`.
///
#[proc_macro_attribute]
pub fn rate_limiter(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::rate_limiter(args.into(), item.into()).into()
}
