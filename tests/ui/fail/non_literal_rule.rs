use ratelimit::{rate_limiter, RateLimited};

const N: u64 = 20;
const LIMIT: u64 = 10;

#[rate_limiter(type = Ip, rules = [(N, 10), (20s, LIMIT), (Duration::from_secs(5), 1)])]
fn handler() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
