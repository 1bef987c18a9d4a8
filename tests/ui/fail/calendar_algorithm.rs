use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = User, user = "u", rules = [(1mo, 3)], algorithm = SlidingWindow)]
fn sliding() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limiter(type = User, user = "u", rules = [(1mo, 3)], algorithm = TokenBucket)]
fn bucket() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limiter(type = User, user = "u", rules = [(3mo, 3)], algorithm = Gcra)]
fn gcra() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limiter(type = User, user = "u", rules = [(1mo, 3)], algorithm = SlidingWindowCounter)]
fn counter() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limiter(type = User, user = "u", rules = [(1mo, 3)], algorithm = LeakyBucket)]
fn leaky() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
