use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = Ip, block = 2m)]
async fn login() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limiter(type = Ip, concurrency = 2, block = 2m)]
async fn report() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
