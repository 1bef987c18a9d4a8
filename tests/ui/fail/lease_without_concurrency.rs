use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = Ip, rules = [(60s, 5)], lease = 30s)]
async fn report() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
