use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = Ip, rules = [(60s, 10), (20s, 5), (1m, 20)])]
fn handler() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
