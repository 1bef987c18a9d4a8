use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = Ip, rules = [(60s, 5)], refund = on_ok)]
#[rate_limiter(type = Global, rules = [(1s, 100)], refund = on_err)]
async fn login() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
