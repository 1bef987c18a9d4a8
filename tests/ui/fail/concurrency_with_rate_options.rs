use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = Ip, rules = [(60s, 5)], concurrency = 2)]
async fn report() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limiter(type = Ip, concurrency = 2, algorithm = TokenBucket, burst = 4)]
async fn export() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limiter(type = Ip, concurrency = 2, mode = shadow)]
async fn watched() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
