use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = Ip)]
fn handler() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
