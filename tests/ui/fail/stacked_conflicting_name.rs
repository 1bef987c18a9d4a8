use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = Ip, rules = [(20s, 10)], name = "orders")]
#[rate_limiter(type = Global, rules = [(20s, 100)], name = "checkout")]
fn handler() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
