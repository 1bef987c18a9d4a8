use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = Ip, rules = [(60s, 1000)], cost = 100, refund = on_err, settle = |_r| 50)]
async fn complete() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
