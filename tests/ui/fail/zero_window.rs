use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = Ip, rules = [(0s, 10)])]
fn handler() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
