use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = User, rules = [(20s, 10)], ip = "203.0.113.7")]
fn handler() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
