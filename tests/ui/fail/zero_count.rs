use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = Ip, rules = [(20s, 0)])]
fn handler() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
