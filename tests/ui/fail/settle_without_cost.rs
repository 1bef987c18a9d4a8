use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = Global, rules = [(60s, 1000)], settle = |_r| 5)]
async fn complete() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
