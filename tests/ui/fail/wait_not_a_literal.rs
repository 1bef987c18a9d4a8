use ratelimit::{rate_limiter, RateLimited};

const WAIT: u64 = 5;

#[rate_limiter(type = Global, rules = [(1s, 10)], wait = WAIT)]
fn handler() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limiter(type = Global, rules = [(1s, 10)], wait = 0ms)]
fn zero() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limiter(type = Global, rules = [(1s, 10)], wait = 2w)]
fn weeks() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
