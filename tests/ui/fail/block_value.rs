use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = Ip, rules = [(60s, 5)], block = 2)]
async fn login() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limiter(type = Ip, rules = [(60s, 5)], block = 367d)]
async fn again() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
