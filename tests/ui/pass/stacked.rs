//! Stacked attributes make one limiter; other attributes in between stay.
#![deny(warnings)]

use ratelimit::RateLimited;

#[ratelimit::rate_limiter(type = Ip, rules = [(20s, 10), (1m, 50)], ip = "203.0.113.1")]
#[inline]
#[rate_limiter(type = Global, rules = [(20s, 100)], on_error = deny)]
#[ratelimit::rate_limiter(type = User, rules = [(20s, 10)], user = "alice", name = "stacked::three")]
#[allow(clippy::needless_return)]
fn three() -> Result<(), RateLimited> {
    return Ok(());
}

use ratelimit::rate_limiter;

// Same type twice with different windows, different prefixes, different algorithms.
#[rate_limiter(type = Ip, rules = [(1s, 5)], ip = "203.0.113.2", algorithm = TokenBucket, burst = 10)]
#[rate_limiter(type = Ip, rules = [(1h, 500)], ip = "203.0.113.2", prefix = "hourly:", algorithm = Gcra)]
#[rate_limiter(type = Key, rules = [(1s, 5)], key = 1, algorithm = FixedWindow)]
#[rate_limiter(type = Key, rules = [(1s, 5)], key = 2, algorithm = SlidingWindowCounter, on_error = allow)]
#[rate_limiter(type = Key, rules = [(1s, 5)], key = 3, algorithm = LeakyBucket)]
async fn mixed() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {
    three().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    rt.block_on(mixed()).unwrap();
}
