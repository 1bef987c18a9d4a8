use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = Global, rules = [(20s, 10)])]
const fn handler() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
