use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = Global, rules = [(20s, 10)], cost = weight)]
fn handler(weight: f64) -> Result<(), RateLimited> {
    let _ = weight;
    Ok(())
}

fn main() {}
