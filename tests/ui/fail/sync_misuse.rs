use ratelimit::{rate_limiter, RateLimited};

// A reserve may not outlive the shortest window its units count in.
#[rate_limiter(type = Global, rules = [(60s, 1000), (1s, 50)], sync = 2s)]
async fn longer_than_a_window() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limiter(type = Ip, rules = [(60s, 5)], block = 2m, sync = 100ms)]
async fn with_block() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limiter(type = Global, concurrency = 4, sync = 100ms)]
async fn with_concurrency() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limiter(type = Global, rules = [(1s, 50)], sync = 100)]
async fn without_unit() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
