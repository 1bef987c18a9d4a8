use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = Key, rules = [(1m, 100)], key = "k", wait = 1s)]
#[rate_limiter(type = Global, rules = [(1s, 10)], wait = 2s)]
async fn handler() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
