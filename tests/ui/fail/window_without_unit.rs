use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = Ip, rules = [(20, 10)])]
fn handler() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
