use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = Ip, rules = [(1s, 10u32)])]
fn handler() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
