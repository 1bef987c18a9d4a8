use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = Global, rules = [(60s, 1000)], cost = 100, settle = 250)]
async fn complete() -> Result<u64, RateLimited> {
    Ok(250)
}

#[rate_limiter(type = Global, rules = [(60s, 1000)], cost = 100, settle = |r: &Result<u64, RateLimited>| r.is_ok())]
async fn answer() -> Result<u64, RateLimited> {
    Ok(250)
}

fn main() {}
