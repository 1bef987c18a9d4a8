use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = Ip, rules = [])]
fn handler() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
