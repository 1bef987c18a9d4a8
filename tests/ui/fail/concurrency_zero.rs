use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = Ip, concurrency = 0)]
async fn report() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
