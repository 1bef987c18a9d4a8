use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = User, rules = [(1m, 100)], user = user, tier = plan)]
#[rate_limiter(type = Ip, rules = [(1s, 10)], tier = "pro")]
async fn handler(user: &str, plan: &str) -> Result<(), RateLimited> {
    let _ = (user, plan);
    Ok(())
}

fn main() {}
