use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = Ip, rules = [(60s, 5)], refund = always)]
async fn login() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
