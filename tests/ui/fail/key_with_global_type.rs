use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = Global, rules = [(20s, 10)], key = "k")]
fn handler() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
