use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = Ip, rules = [(20s, 10)], mode = quiet)]
fn handler() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
