use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = Ip, rules = [(20s, 9_007_199_254_740_992)])]
fn handler() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
