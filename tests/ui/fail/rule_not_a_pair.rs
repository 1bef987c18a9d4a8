use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = Ip, rules = [(20s, 10, 5), 20s])]
fn handler() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
