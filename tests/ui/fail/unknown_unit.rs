use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = Ip, rules = [(20sec, 10)])]
fn handler() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
