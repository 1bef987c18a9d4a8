// A literal out of the runtime's bounds is reported together with the attribute's other errors.
use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = Ip, rules = [(20s, 1_000_000_001)], colour = "red")]
fn handler() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
