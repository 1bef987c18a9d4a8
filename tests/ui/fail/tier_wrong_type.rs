use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = Ip, rules = [(20s, 10)], tier = plan_id)]
fn handler(plan_id: u32) -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
