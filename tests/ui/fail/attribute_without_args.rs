use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter]
fn handler() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
