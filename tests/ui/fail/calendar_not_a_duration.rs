use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = Global, rules = [(1mo, 3)], block = 1mo)]
fn block() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limiter(type = Global, rules = [(1mo, 3)], wait = 1mo)]
fn wait() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
