//! Literals exactly at the runtime's bounds (MAX_WINDOW = 366 days, MAX_COUNT = 1_000_000_000)
//! compile, and the limiter builds.
#![deny(warnings)]

use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = Global, rules = [(31_622_400_000ms, 1_000_000_000), (1ms, 1)])]
// A full bucket of the largest burst drains in 1000s here: well within MAX_WINDOW.
#[rate_limiter(type = Key, key = "k", rules = [(1s, 1_000_000_000)], algorithm = TokenBucket, burst = 1_000_000_000)]
fn at_the_bounds() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limiter(type = Global, rules = [(1s, 1)], wait = 366d)]
fn longest_wait() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {
    at_the_bounds().unwrap();
    longest_wait().unwrap();
}
