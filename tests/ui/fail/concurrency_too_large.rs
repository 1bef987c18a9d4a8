use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = Ip, concurrency = 1_000_000_001, lease = 400d)]
async fn report() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
