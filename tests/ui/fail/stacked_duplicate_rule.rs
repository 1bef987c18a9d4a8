use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = Ip, rules = [(20s, 10), (1m, 50)])]
#[rate_limiter(type = Ip, rules = [(60s, 30)])]
fn handler() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
