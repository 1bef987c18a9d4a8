use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = Ip, concurrency = 2, cost = 100, settle = |_r| 50)]
async fn complete() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
