use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = Global, rules = [(1s, 10)], wait = 5)]
fn handler() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
