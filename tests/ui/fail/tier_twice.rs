use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = Ip, rules = [(20s, 10)], tier = plan, tier = "pro")]
fn handler(plan: &str) -> Result<(), RateLimited> {
    let _ = plan;
    Ok(())
}

fn main() {}
