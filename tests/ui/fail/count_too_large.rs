// One past the runtime's MAX_COUNT (1_000_000_000): the runtime's bound, checked at compile time.
use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = Ip, rules = [(20s, 1_000_000_001)])]
fn handler() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
